//! ruleop: a Kubernetes operator that is a declarative rules engine.
//!
//! ```text
//!  rules/*.yaml + templates/**  --load-->  RuleSet (validated, compiled; swapped whole on reload)
//!  parent + observed children   --plan-->  Plan (children, prune list, action decisions, status patch)
//!  Plan                         --apply--> server-side apply, prune, actions, status   (the only I/O)
//! ```
//!
//! Everything left of `apply` is a pure function of values: [`rules::load::load`],
//! [`plan::plan`]. The offline commands (`check`, `render`, `test`) use only that part; `diff` plans
//! live parents the same way and asks the API server only for dry runs.
#![forbid(unsafe_code)]

pub mod admin;
pub mod apply;
pub mod child_index;
pub mod cli;
pub mod clock;
pub mod controller;
pub mod diagnostic;
pub mod diff;
pub mod fuzzing;
pub mod health;
pub mod housekeeping;
pub mod kinds;
pub mod leader;
pub mod lookup_index;
pub mod metrics;
pub mod offline;
pub mod packed;
pub mod parent_index;
pub mod plan;
pub mod queue;
pub mod rbac;
pub mod rules;
pub mod ruletest;
pub mod run;
pub mod shard;
pub mod telemetry;
pub mod template;
pub mod watch;
pub mod yaml;
