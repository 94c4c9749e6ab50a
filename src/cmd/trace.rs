//! `ruleop trace`: one parent's live tree ([`inspect::trace`]).

use std::process::ExitCode;

use clap::ValueEnum;

use crate::cmd::flags::SourceFlags;
use crate::inspect::{self, trace::Output};

/// Show the live tree of one parent, read-only: the rule watching its kind, generation and
/// observedGeneration, every condition with its full message, the cleanup finalizer and what
/// holds a deletion; then each child as the operator plans it now (exists, ready and the
/// readyWhen deciding it, waiting on dependsOn, held by scaling or updateStrategy, drift of
/// its managed fields against a server-side apply dry run, owned by ownerReference or
/// labels), forEach items (folded after 20), actions with their records, lookups, and the
/// parent's last Events. A Secret child shows its name and data keys only.
/// Exit 0: the parent is Ready; 1: not Ready; 2: error (not found, no rule watches the kind).
/// Also runs as `kubectl ruleop trace` (an executable `kubectl-ruleop` on PATH).
///
/// Permissions: get on the watched kind (list, to name the parents when one is not found);
/// list on child kinds in all namespaces; patch (server-side apply with dryRun=All, never
/// persisted) on child kinds whose live object differs from the rendering; get or list on
/// looked-up kinds; list on Events; API discovery.
#[derive(Debug, clap::Args)]
#[command(after_long_help = TRACE_EXAMPLES)]
pub(crate) struct Args {
    #[command(flatten)]
    sources: SourceFlags,
    /// The parent, as KIND/NAME: the kind by name, plural or plural.group, any case
    /// (database/orders, databases.myorg.io/orders).
    target: String,
    /// The parent's namespace (default: the kubeconfig context's).
    #[arg(long, short = 'n')]
    namespace: Option<String>,
    /// Redraw whenever anything changes, until Ctrl-C: the cluster is read again every 2 s
    /// (polling, not a watch).
    #[arg(long, short = 'w')]
    watch: bool,
    /// Output format: a tree (colours and symbols on a terminal, plain when piped), or the
    /// whole trace as one JSON or YAML document (the same model).
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Tree)]
    output: Format,
}

/// Examples of `ruleop trace` (`ruleop trace --help`).
const TRACE_EXAMPLES: &str = "\
Examples:
  ruleop trace database/orders -n shop            the tree; exit 0 when Ready
  ruleop trace databases.myorg.io/orders -o json  one JSON document (the Trace model)
  kubectl ruleop trace database/orders --watch    redraw every 2 s while something changes
See docs/reference/trace.md for what each part of the output means.";

/// How `trace` prints the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// An indented tree.
    Tree,
    /// The Trace model as JSON.
    Json,
    /// The Trace model as YAML.
    Yaml,
}

/// Prints the tree (or redraws it with `--watch`): exit 0 when the parent is Ready, 1 when
/// not, 2 on error.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args {
        sources,
        target,
        namespace,
        watch,
        output,
    } = args;
    let options = inspect::trace::Options {
        target,
        namespace,
        watch,
        output: match output {
            Format::Tree => Output::Tree,
            Format::Json => Output::Json,
            Format::Yaml => Output::Yaml,
        },
    };
    ExitCode::from(inspect::trace::command(&sources.into(), &options))
}
