//! `ruleop run`: the run loop, rule reloads, one controller per rule, and the work queue.

pub(crate) mod clock;
pub(crate) mod config_map_feed;
pub(crate) mod controller;
pub(crate) mod housekeeping;
pub(crate) mod pins;
pub(crate) mod queue;
pub(crate) mod reload;
pub(crate) mod revisions;
pub(crate) mod rollout;
pub(crate) mod rollout_control;
pub(crate) mod rollout_driver;
pub(crate) mod rollout_report;
pub(crate) mod rollout_resume;
pub(crate) mod run;
pub(crate) mod shutdown;
pub(crate) mod supervisor;
pub(crate) mod workers;
