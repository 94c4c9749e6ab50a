//! Staged rollouts in the running operator: the state between reconciles and the step clock
//! ([`staging`]), and resuming and following what `ruleop-status` records ([`resume`]). The
//! decisions are the engine's (`engine::rollout`); the records are [`crate::records::rollouts`]
//! and [`crate::records::requests`]; the reload loop drives them (`reload/rollouts.rs`).

pub(crate) mod resume;
pub(crate) mod staging;
