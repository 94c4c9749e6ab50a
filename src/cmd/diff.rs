//! `ruleop diff`: what a proposed rule set, or a kept revision, would change in the live
//! cluster ([`inspect::diff`]).

use std::process::ExitCode;

use crate::cmd::flags::SourceFlags;
use crate::inspect::{self, diff::Kept};

/// Show what a proposed rule set would change in the live cluster, without writing: per
/// parent a unified diff of each child's managed fields (live vs a server-side apply dry
/// run), children created and pruned, actions that would run, the status change.
/// Exit 0: no change; 1: changes; 2: error.
///
/// Permissions: get, list on the watched kinds; list and patch (server-side apply with
/// dryRun=All, which the API server never persists) on child kinds, plus create for
/// children that do not exist yet; get on looked-up kinds; API discovery.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    sources: SourceFlags,
    /// Only parents in this namespace (default: all namespaces).
    #[arg(long, short = 'n', env = "RULEOP_NAMESPACE")]
    namespace: Option<String>,
    /// Only parents matching this label selector (as well as the rule's own).
    #[arg(long, short = 'l')]
    selector: Option<String>,
    /// The time stamped on changed conditions (RFC 3339; default: now).
    #[arg(long, env = "RULEOP_NOW")]
    now: Option<String>,
    /// Diff kept revision N of --rule instead of the files: what putting it back would change
    /// (read from ConfigMap ruleop-rev-<rule>-<N> in --status-namespace).
    #[arg(long, value_name = "N", requires = "rule")]
    revision: Option<u64>,
    /// The rule whose kept revision --revision names.
    #[arg(long, requires = "revision")]
    rule: Option<String>,
    /// Namespace of the kept revisions (ruleop's own), with --revision.
    #[arg(long, env = "RULEOP_STATUS_NAMESPACE", default_value = "ruleop-system")]
    status_namespace: String,
}

/// Prints the diff: exit 0 without changes, 1 with, 2 on error.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args {
        sources,
        namespace,
        selector,
        now,
        revision,
        rule,
        status_namespace,
    } = args;
    let kept = revision.zip(rule).map(|(revision, rule)| Kept {
        rule,
        revision,
        status_namespace,
    });
    ExitCode::from(inspect::diff::command(sources.into(), namespace, selector, now, kept))
}
