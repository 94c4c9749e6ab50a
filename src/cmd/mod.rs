//! The command line, and nothing else: the `ruleop` parser, one module per subcommand that owns
//! its clap [`clap::Args`] and one `run(args) -> ExitCode`, and [`main`], a plain match from
//! the subcommand to its `run` (`reference` also gets the whole command, which it documents).
//! What a command does lives in [`crate::offline`] (the engine without a cluster),
//! [`crate::inspect`] (read-only live views) and [`crate::runtime`] (`run`); those take plain
//! values, never clap types.

mod check;
mod console;
mod crd;
mod diff;
mod flags;
mod output;
mod rbac;
mod reference;
mod render;
mod rollout;
mod run;
mod schema;
mod status;
mod test;
mod trace;

use std::process::ExitCode;

use clap::{CommandFactory as _, Parser, Subcommand};

/// A Kubernetes operator that is a declarative rules engine: each rule maps a watched custom
/// resource to templated children, guarded one-shot actions and status.
#[derive(Debug, Parser)]
#[command(name = "ruleop", version, about, long_about = None)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    command: Command,
}

/// The subcommands, in the order `--help` lists them. A variant carries no `///`: each
/// subcommand's help is the doc of its `Args`, beside its flags.
#[derive(Debug, Subcommand)]
enum Command {
    Run(Box<run::Args>),
    Check(check::Args),
    Render(render::Args),
    Crd(crd::Args),
    Rbac(rbac::Args),
    Schema(schema::Args),
    Test(test::Args),
    Diff(diff::Args),
    Trace(trace::Args),
    Status(status::Args),
    Rollout(rollout::Args),
    Console(console::Args),
    #[command(hide = true)]
    Reference(reference::Args),
}

/// Runs the command line: parses the arguments and runs the subcommand, whose exit code is the
/// process's. The whole of the `ruleop` binary.
pub fn main() -> ExitCode {
    match Cli::parse().command {
        Command::Run(args) => run::run(*args),
        Command::Check(args) => check::run(args),
        Command::Render(args) => render::run(args),
        Command::Crd(args) => crd::run(args),
        Command::Rbac(args) => rbac::run(args),
        Command::Schema(args) => schema::run(args),
        Command::Test(args) => test::run(args),
        Command::Diff(args) => diff::run(args),
        Command::Trace(args) => trace::run(args),
        Command::Status(args) => status::run(args),
        Command::Rollout(args) => rollout::run(args),
        Command::Console(args) => console::run(args),
        Command::Reference(args) => reference::run(args, Cli::command()),
    }
}
