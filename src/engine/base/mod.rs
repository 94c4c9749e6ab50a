//! The engine's floor: small pure helpers that templates, rules and planning all share, so none
//! of them has to import another for them. Digests as hex, reading a directory of source files,
//! the names and keys Kubernetes accepts, the built-in kinds known offline, and cron schedules.
//! Nothing here names another engine module but `diagnostic`.

pub(crate) mod builtin_kinds;
pub(crate) mod digest;
pub(crate) mod files;
pub(crate) mod k8s_names;
pub(crate) mod schedule;
