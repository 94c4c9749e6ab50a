//! ruleop's own records: the ConfigMaps it keeps in the status namespace, one module per record
//! (its name, keys, encoding, and reading and writing), shared by the running operator and the
//! read-only tools, so a reader never imports the writer's internals.
//!
//! | record | module |
//! |---|---|
//! | `ruleop-status`: the reload report (`state`, `errors`, `rulesInForce`, `revisions`, ...) | [`status`] |
//! | `ruleop-status`: the staged rollouts' states (`rollout.<rule>`) | [`rollouts`] |
//! | `ruleop-rev-<rule>-<n>`: the kept revisions of each rule | [`revisions`] |
//! | `ruleop-rollout-<rule>`: the requests of `ruleop rollout pause\|resume\|undo` | [`requests`] |
//!
//! A layer of its own between `ha` and `runtime` (not a folder of `runtime/`): the read-only
//! tools read these records, and would otherwise depend on the whole run loop to do so.

pub(crate) mod clock;
pub(crate) mod feed;
pub(crate) mod requests;
pub(crate) mod revisions;
pub(crate) mod rollouts;
pub(crate) mod status;
