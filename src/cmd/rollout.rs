//! `ruleop rollout`: staged rollouts and kept revisions in the cluster, shown or asked of the
//! running operator ([`inspect::rollout`]).

use std::process::ExitCode;
use std::time::Duration;

use clap::ValueEnum;

use crate::engine::rollout::control::Command as Ask;
use crate::inspect::{self, rollout::Show};

/// Staged rollouts and kept rule revisions in the cluster.
///
/// `status` shows each rule's revision in force and its rollout (step, phase, the parents
/// that failed and why); `history` lists the kept revisions, each with a unified diff of its
/// changed files against the one before. Both only read. Exit 1 when `status` finds a rollout
/// halted (not paused) or rolled back, 2 on error.
///
/// `pause`, `resume` and `undo` ask the running operator (the leader) to change a rule's
/// rollout: a request ConfigMap `ruleop-rollout-<rule>` in --status-namespace, which the
/// operator follows once, records in `ruleop-status` and deletes; this command waits for that
/// (--wait) and prints the new state. `pause`: no further step and no further parent moves;
/// the moved parents stay (phase Halted, note "paused"). `resume`: a paused or halted
/// rollout goes on; its current step's pause starts again and earlier failures are
/// forgotten. `undo`: every parent of the rule goes back to the previous kept revision (with
/// a rollout under way: the one it moves from), until the rule's files change again; the
/// next edit then rolls out from there. RULE may be left out when exactly one rollout is in
/// progress. Refused with a clear error (exit 2): a rule not in force, pause or resume with
/// no rollout in progress, resume of a rollout that goes on, undo with no earlier revision
/// kept. Exit 1 when no operator followed the request within --wait (it stays, and is
/// followed when one runs).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// What to show or do.
    #[arg(value_enum)]
    show: Verb,
    /// Only this rule (default: every rule; for pause, resume and undo: the one rollout in
    /// progress).
    rule: Option<String>,
    /// Namespace of the `ruleop-status` ConfigMap and the kept revisions (ruleop's own).
    #[arg(long, env = "RULEOP_STATUS_NAMESPACE", default_value = "ruleop-system")]
    status_namespace: String,
    /// How long pause, resume and undo wait for the operator to follow the request.
    #[arg(long, env = "RULEOP_ROLLOUT_WAIT", default_value = "30s", value_parser = parse_wait)]
    wait: Duration,
}

/// What `rollout` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Verb {
    /// Each rule's revision in force and its rollout's state.
    Status,
    /// The kept revisions with the diffs of their files.
    History,
    /// Stop the rule's rollout where it is.
    Pause,
    /// Let a paused or halted rollout go on.
    Resume,
    /// Put every parent back on the previous revision until the files change again.
    Undo,
}

/// A duration such as `30s` or `2m` (at least 1s).
fn parse_wait(text: &str) -> Result<Duration, String> {
    crate::engine::duration::parse_at_least(text, Duration::from_secs(1))
}

/// Shows or asks: exit 1 when `status` finds a rollout halted or rolled back or no operator
/// followed a request within `--wait`, 2 on error.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args {
        show,
        rule,
        status_namespace,
        wait,
    } = args;
    let show = match show {
        Verb::Status => Show::Status,
        Verb::History => Show::History,
        Verb::Pause => Show::Ask(Ask::Pause, wait),
        Verb::Resume => Show::Ask(Ask::Resume, wait),
        Verb::Undo => Show::Ask(Ask::Undo, wait),
    };
    ExitCode::from(inspect::rollout::command(show, rule.as_deref(), &status_namespace))
}
