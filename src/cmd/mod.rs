//! The command line: argument types, the offline commands (`check`, `render`, `test`), the
//! read-only live ones (`diff`, `trace`, `status`, `rollout`, `console`, sharing [`live`]), and the
//! generated reference pages (`reference`).

pub mod cli;
pub(crate) mod console;
pub(crate) mod diff;
mod dispatch;
pub(crate) mod live;
pub mod offline;
pub(crate) mod reference;
pub(crate) mod rollout;
pub(crate) mod ruletest;
mod run;
pub(crate) mod status;
pub(crate) mod trace;

pub use dispatch::main;
