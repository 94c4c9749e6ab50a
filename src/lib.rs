//! ruleop: a Kubernetes operator that is a declarative rules engine.
//!
//! ```text
//!  rules/*.yaml + templates/**  --load-->  RuleSet (validated, compiled; swapped whole on reload)
//!  parent + observed children   --plan-->  Plan (children, prune list, action decisions, status patch)
//!  Plan                         --apply--> server-side apply, prune, actions, status   (the only I/O)
//! ```
//!
//! Everything left of `apply` is a pure function of values: [`engine::rules::load::load`],
//! [`engine::plan::plan`]. The offline commands (`check`, `render`, `test`) use only that part; `diff` plans
//! live parents the same way and asks the API server only for dry runs.
#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_docs)]

pub(crate) mod apply;
pub(crate) mod cache;
pub mod cmd;
pub mod engine;
pub mod ha;
pub(crate) mod inspect;
pub mod offline;
pub(crate) mod ops;
pub(crate) mod records;
pub(crate) mod runtime;

pub use apply::FIELD_MANAGER;
