//! `ruleop test`: the RuleTests run offline ([`offline::ruletest`]).

use std::path::PathBuf;
use std::process::ExitCode;

use crate::cmd::flags::{CrdFlags, SourceFlags};
use crate::offline;

/// Run rule tests offline: each case of each `kind: RuleTest` document plans a parent and
/// checks children, prunes, actions, status or an expected error. One PASS/FAIL line per
/// case with its file:line, the first mismatch of a failure, a summary. Exit 0 when all
/// pass, 1 when any fails, 2 when nothing could be run.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    sources: SourceFlags,
    #[command(flatten)]
    schemas: CrdFlags,
    /// Test files, or directories searched recursively for YAML files with RuleTest
    /// documents (default: --tests).
    paths: Vec<PathBuf>,
    /// The test directory used when no PATH is given (default: `tests/` beside the rules
    /// directory).
    #[arg(long = "tests", env = "RULEOP_TESTS")]
    tests_dir: Option<PathBuf>,
    /// Also write the results as JUnit XML to this file.
    #[arg(long, env = "RULEOP_JUNIT")]
    junit: Option<PathBuf>,
}

/// Prints a line per case: exit 0 when all pass, 1 when any fails, 2 when nothing ran.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args {
        sources,
        schemas,
        paths,
        tests_dir,
        junit,
    } = args;
    ExitCode::from(offline::ruletest::command(
        &sources.into(),
        &schemas.into(),
        &paths,
        tests_dir,
        junit.as_deref(),
    ))
}
