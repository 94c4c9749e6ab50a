//! `ruleop run`: the run loop, rule admission and reloads, one controller per rule, staged
//! rollouts, and the work queue. The modules, from the bottom up (each imports only those before
//! it; `ORDERS` in `tests/it/offline/layers.rs` holds the order): `shutdown`, `queue`, `workers`,
//! `admit`, `pins`, `rollout/`, `controller/`, `supervisor`, `reload/`, `run`.

pub(crate) mod admit;
pub(crate) mod controller;
pub(crate) mod pins;
pub(crate) mod queue;
pub(crate) mod reload;
pub(crate) mod rollout;
pub(crate) mod run;
pub(crate) mod shutdown;
pub(crate) mod supervisor;
pub(crate) mod workers;
