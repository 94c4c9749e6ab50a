//! `ruleop diff`: what a proposed rule set would change in the live cluster (being built).

use crate::cli::Sources;

/// `ruleop diff` as a command; returns the exit code.
pub fn command(_sources: Sources, _namespace: Option<String>, _selector: Option<String>, _now: Option<String>) -> u8 {
    eprintln!("error: ruleop diff is not available in this build yet");
    2
}
