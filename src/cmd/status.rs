//! `ruleop status`: what ruleop is doing, read-only ([`inspect::status`]).

use std::process::ExitCode;

use clap::ValueEnum;

use crate::cmd::flags::SourceFlags;
use crate::inspect;

/// Show what ruleop is doing, read-only: the last reload (the `ruleop-status` ConfigMap),
/// the Leases and who holds them, and per rule its parents by Ready, the ones not Ready the
/// longest (with reason and message) and the ones ruleop has not caught up with. Exit 0 when
/// the last reload loaded and every parent is Ready, 1 when not, 2 on error.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    sources: SourceFlags,
    /// Namespace of the `ruleop-status` ConfigMap and the Leases (ruleop's own namespace).
    #[arg(long, env = "RULEOP_STATUS_NAMESPACE", default_value = "ruleop-system")]
    status_namespace: String,
    /// Only count and list parents in this namespace (default: all namespaces).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Text)]
    output: Format,
}

/// How `status` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Lines for people.
    Text,
    /// The Status model as JSON.
    Json,
}

/// Prints the report: exit 0 when the last reload loaded and every parent is Ready, 1 when
/// not, 2 on error.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args {
        sources,
        status_namespace,
        namespace,
        output,
    } = args;
    let options = inspect::status::Options {
        status_namespace,
        namespace,
        json: output == Format::Json,
    };
    ExitCode::from(inspect::status::command(&sources.into(), &options))
}
