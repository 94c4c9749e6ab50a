//! The command line: argument types and the offline commands (`check`, `render`, `test`, `diff`).

pub mod cli;
pub mod diff;
pub mod offline;
pub mod ruletest;
