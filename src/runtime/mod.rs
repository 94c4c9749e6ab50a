//! `ruleop run`: the run loop, rule reloads, one controller per rule, the work queue and discovery.

pub mod clock;
pub mod controller;
pub mod discovery;
pub mod housekeeping;
pub mod queue;
pub mod reload;
pub mod run;
pub mod shutdown;
