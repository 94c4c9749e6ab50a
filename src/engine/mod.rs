//! The pure engine: rules in, plans out. Loading, templates, planning and the built-in kinds are
//! functions of values; nothing here holds a client, a runtime or a file watcher.
//!
//! Its modules import one way, from the bottom up (tests/it/offline/layers.rs holds the order):
//! `diagnostic`, `yaml`, `egress` < `duration`, `field_at`, `base` < `schema`, `template` <
//! `rules` < `plan`, `rollout`, `rbac` < `schema_check`, `fuzzing`.

pub(crate) mod base;
pub(crate) mod diagnostic;
pub(crate) mod duration;
pub(crate) mod egress;
pub(crate) mod field_at;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod plan;
pub(crate) mod rbac;
pub mod rollout;
pub mod rules;
pub(crate) mod schema;
pub(crate) mod schema_check;
pub(crate) mod template;
pub(crate) mod yaml;
