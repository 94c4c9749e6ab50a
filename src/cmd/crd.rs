//! `ruleop crd`: the CRDs of the rules that carry `spec.schema` ([`offline::generate::crd`]).

use std::process::ExitCode;

use crate::cmd::flags::SourceFlags;
use crate::cmd::output;
use crate::offline;

/// Print the CRD of every rule that carries `spec.schema` (group, version and kind from
/// `watch`, the status the engine writes, printer columns, short names); `ruleop check`
/// fails while the committed copy (in --crds) differs.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    sources: SourceFlags,
}

/// Prints the CRDs, or exits 1 when no rule has a schema.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args { sources } = args;
    output::printed(offline::generate::crd(&sources.into()))
}
