//! `ruleop run`: the run loop, rule reloads, one controller per rule, and the work queue.

pub mod clock;
pub mod controller;
pub mod housekeeping;
pub mod queue;
pub mod reload;
pub mod run;
pub mod shutdown;
pub mod supervisor;
pub mod workers;
