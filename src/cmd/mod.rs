//! The command line: argument types, the offline commands (`check`, `render`, `test`), the
//! read-only live ones (`diff`, `trace`, `status`, sharing [`live`]), and the generated reference pages
//! (`reference`).

pub mod cli;
pub mod diff;
mod dispatch;
pub mod live;
pub mod offline;
pub mod reference;
pub mod ruletest;
pub mod status;
pub mod trace;

pub use dispatch::main;
