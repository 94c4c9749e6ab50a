//! `ruleop check`: validate the rules and templates ([`offline::check`]).

use std::process::ExitCode;

use crate::cmd::flags::{CrdFlags, SourceFlags};
use crate::cmd::output;
use crate::offline;

/// Validate every rule and template; print each problem as file:line:col and exit 1 if any.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    sources: SourceFlags,
    #[command(flatten)]
    schemas: CrdFlags,
}

/// Prints the summary (or every problem) and exits 1 on a problem.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args { sources, schemas } = args;
    output::printed(offline::check(&sources.into(), &schemas.into()))
}
