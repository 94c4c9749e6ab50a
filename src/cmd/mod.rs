//! The command line: argument types and the offline commands (`check`, `render`, `test`, `diff`), and
//! the generated reference pages (`reference`).

pub mod cli;
pub mod diff;
pub mod offline;
pub mod reference;
pub mod ruletest;
