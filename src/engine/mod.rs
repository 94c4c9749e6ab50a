//! The pure engine: rules in, plans out. Loading, templates, planning and the built-in kinds are
//! functions of values; nothing here holds a client, a runtime or a file watcher.

pub mod diagnostic;
pub mod duration;
pub mod egress;
#[cfg(any(test, feature = "fuzzing"))]
pub mod fuzzing;
pub mod plan;
pub mod rbac;
pub mod rules;
pub mod schema;
pub mod template;
pub mod yaml;
