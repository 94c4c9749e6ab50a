//! The read-only live views: `diff`, `trace`, `status`, `rollout` and `console`, sharing what
//! they read from the cluster ([`live`]).

pub(crate) mod console;
pub(crate) mod diff;
pub(crate) mod live;
pub(crate) mod rollout;
pub(crate) mod status;
pub(crate) mod tenant_text;
pub(crate) mod trace;
