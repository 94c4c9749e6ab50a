//! The command line: argument types, the dispatch to a command, the `run` command's wiring and
//! the generated reference pages (`reference`).

pub mod cli;
mod dispatch;
pub(crate) mod reference;
mod run;

pub use dispatch::main;
