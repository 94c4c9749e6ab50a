//! `ruleop rbac`: the ClusterRole the rules need ([`offline::generate::rbac`]).

use std::process::ExitCode;

use crate::cmd::flags::{CrdFlags, SourceFlags};
use crate::cmd::output;
use crate::offline;

/// Print the minimal ClusterRole the rules need (committed as deploy/helm/ruleop/files/clusterrole.yaml).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    sources: SourceFlags,
    /// The CRDs give the plurals of custom kinds.
    #[command(flatten)]
    schemas: CrdFlags,
}

/// Prints the ClusterRole, or exits 1 when the rules do not load.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args { sources, schemas } = args;
    output::printed(offline::generate::rbac(&sources.into(), &schemas.into()))
}
