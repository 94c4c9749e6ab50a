//! Staged rollouts in the running operator: the state between reconciles ([`staging`]), resuming
//! and following what `ruleop-status` records ([`resume`]), and the step clock, halts and
//! requests the reload loop drives ([`driver`]). The decisions are the engine's
//! (`engine::rollout`); the records are [`crate::records::rollouts`] and
//! [`crate::records::requests`].

pub(crate) mod driver;
pub(crate) mod resume;
pub(crate) mod staging;
