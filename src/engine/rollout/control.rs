//! What an operator's `ruleop rollout pause|resume|undo` does to a rule's rollout, decided as a
//! function of the rollout's state: the request as the cluster carries it (a ConfigMap's data,
//! read as untrusted text), and the state it leads to, or why it cannot.

use std::collections::BTreeMap;

use super::select::{Phase, RolloutState};

/// The label that marks a request ConfigMap, its value the rule (`ruleop-rollout-<rule>`).
pub const REQUEST_LABEL: &str = "ruleop.io/rollout-request";

/// The name of the ConfigMap that carries a request about `rule`.
pub fn request_name(rule: &str) -> String {
    format!("ruleop-rollout-{rule}")
}

/// What an operator asks of a rollout.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Command {
    /// Stop moving parents: no further step; the moved parents stay.
    Pause,
    /// Go on from a pause (or a halt): the current step's pause starts again.
    Resume,
    /// Every parent back on the previous revision, until the rule's files change again.
    Undo,
}

impl Command {
    /// The word on the command line and in the request.
    pub fn as_str(self) -> &'static str {
        match self {
            Command::Pause => "pause",
            Command::Resume => "resume",
            Command::Undo => "undo",
        }
    }

    fn parse(text: &str) -> Option<Command> {
        match text {
            "pause" => Some(Command::Pause),
            "resume" => Some(Command::Resume),
            "undo" => Some(Command::Undo),
            _ => None,
        }
    }
}

/// One request, as `ruleop rollout pause|resume|undo` writes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// What to do.
    pub command: Command,
    /// The revision in force of the rule when it was asked: a request about a revision the
    /// files have moved past is not followed.
    pub revision: u64,
    /// For `undo`: the revision to go back to (the kept one before `revision`).
    pub previous: Option<u64>,
}

/// Why a request is not followed (logged, a Warning Event, and the request is let go).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refused {
    /// The ConfigMap does not hold a request.
    #[error("not a rollout request: {0}")]
    Invalid(String),
    /// The rule's files moved on since the request was made.
    #[error("the request is about revision {asked}, but revision {in_force} is in force")]
    Stale {
        /// The revision the request names.
        asked: u64,
        /// The revision in force now.
        in_force: u64,
    },
    /// Pause or resume with no rollout in progress.
    #[error("no rollout is in progress (it is {0})")]
    NotInProgress(&'static str),
    /// Resume of a rollout that goes on.
    #[error("the rollout is not paused or halted (it is {0})")]
    NotPaused(&'static str),
    /// Undo with no revision before the one in force.
    #[error("no revision before {0} is kept to go back to")]
    NothingToUndo(u64),
}

impl Request {
    /// The ConfigMap data that carries it.
    pub fn to_data(&self) -> BTreeMap<String, String> {
        let mut data = BTreeMap::from([
            ("command".to_owned(), self.command.as_str().to_owned()),
            ("revision".to_owned(), self.revision.to_string()),
        ]);
        if let Some(previous) = self.previous {
            data.insert("previous".to_owned(), previous.to_string());
        }
        data
    }

    /// Reads a request back from a ConfigMap's data; anyone who may write ConfigMaps in the
    /// status namespace may write one, so every value is checked.
    pub fn from_data(data: &BTreeMap<String, String>) -> Result<Request, Refused> {
        let field = |key: &str| data.get(key).map(|v| v.trim());
        let number = |key: &str| -> Result<Option<u64>, Refused> {
            match field(key) {
                None => Ok(None),
                Some(text) if !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()) => text
                    .parse()
                    .map(Some)
                    .map_err(|_| Refused::Invalid(format!("{key} is out of range"))),
                Some(text) => Err(Refused::Invalid(format!(
                    "{key} {:?} is not a revision number",
                    crate::engine::diagnostic::bounded(text, 64)
                ))),
            }
        };
        let command = field("command").unwrap_or_default();
        let command = Command::parse(command).ok_or_else(|| {
            Refused::Invalid(format!(
                "command {:?} is not pause, resume or undo",
                crate::engine::diagnostic::bounded(command, 64)
            ))
        })?;
        let revision = number("revision")?.ok_or_else(|| Refused::Invalid("no revision".to_owned()))?;
        let previous = number("previous")?;
        if command == Command::Undo && previous.is_none_or(|p| p >= revision) {
            return Err(Refused::Invalid(
                "undo names no previous revision below the one in force".to_owned(),
            ));
        }
        Ok(Request {
            command,
            revision,
            previous,
        })
    }
}

/// The phase's name, as `ruleop-status` writes it.
pub fn phase_name(phase: Phase) -> &'static str {
    match phase {
        Phase::Progressing => "Progressing",
        Phase::Halted => "Halted",
        Phase::RolledBack => "RolledBack",
        Phase::Complete => "Complete",
    }
}

/// The state a request leads to, from the rule's rollout `state` (`None`: no rollout under way)
/// with revision `in_force` of the rule in force. `undo` without a rollout under way goes back
/// from `in_force` to the request's previous revision.
pub fn apply(state: Option<&RolloutState>, in_force: u64, request: &Request) -> Result<RolloutState, Refused> {
    if request.revision != in_force {
        return Err(Refused::Stale {
            asked: request.revision,
            in_force,
        });
    }
    let under_way = state.filter(|s| s.to == in_force && s.phase != Phase::Complete);
    match (request.command, under_way) {
        (Command::Pause | Command::Resume, None) => Err(Refused::NotInProgress(
            state.map_or("over, or never began", |s| phase_name(s.phase)),
        )),
        (Command::Pause, Some(state)) => match state.phase {
            Phase::Progressing | Phase::Halted => Ok(RolloutState {
                phase: Phase::Halted,
                ..state.clone()
            }),
            other => Err(Refused::NotInProgress(phase_name(other))),
        },
        (Command::Resume, Some(state)) => match state.phase {
            Phase::Halted => Ok(RolloutState {
                phase: Phase::Progressing,
                ..state.clone()
            }),
            other => Err(Refused::NotPaused(phase_name(other))),
        },
        (Command::Undo, Some(state)) => Ok(RolloutState {
            phase: Phase::RolledBack,
            ..state.clone()
        }),
        (Command::Undo, None) => {
            let from = request.previous.ok_or(Refused::NothingToUndo(in_force))?;
            Ok(RolloutState {
                from,
                to: in_force,
                step: 0,
                phase: Phase::RolledBack,
            })
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(command: Command, revision: u64, previous: Option<u64>) -> Request {
        Request {
            command,
            revision,
            previous,
        }
    }

    fn state(phase: Phase) -> RolloutState {
        RolloutState {
            from: 1,
            to: 2,
            step: 0,
            phase,
        }
    }

    #[test]
    fn pause_halts_a_progressing_rollout_and_resume_sets_it_going_again() {
        let paused = apply(Some(&state(Phase::Progressing)), 2, &request(Command::Pause, 2, None)).expect("paused");
        assert_eq!(paused, state(Phase::Halted));
        let resumed = apply(Some(&paused), 2, &request(Command::Resume, 2, None)).expect("resumed");
        assert_eq!(resumed, state(Phase::Progressing));
        assert_eq!(
            apply(Some(&resumed), 2, &request(Command::Resume, 2, None)),
            Err(Refused::NotPaused("Progressing"))
        );
    }

    #[test]
    fn pause_and_resume_without_a_rollout_in_progress_are_refused() {
        for command in [Command::Pause, Command::Resume] {
            assert_eq!(
                apply(None, 2, &request(command, 2, None)),
                Err(Refused::NotInProgress("over, or never began"))
            );
            assert_eq!(
                apply(Some(&state(Phase::Complete)), 2, &request(command, 2, None)),
                Err(Refused::NotInProgress("Complete"))
            );
        }
        assert_eq!(
            apply(Some(&state(Phase::RolledBack)), 2, &request(Command::Pause, 2, None)),
            Err(Refused::NotInProgress("RolledBack"))
        );
    }

    #[test]
    fn undo_rolls_a_rollout_back_or_goes_back_to_the_previous_revision_without_one() {
        assert_eq!(
            apply(Some(&state(Phase::Halted)), 2, &request(Command::Undo, 2, Some(1))),
            Ok(state(Phase::RolledBack))
        );
        assert_eq!(
            apply(None, 5, &request(Command::Undo, 5, Some(3))),
            Ok(RolloutState {
                from: 3,
                to: 5,
                step: 0,
                phase: Phase::RolledBack
            })
        );
    }

    #[test]
    fn a_request_about_a_revision_the_files_moved_past_is_stale() {
        assert_eq!(
            apply(Some(&state(Phase::Progressing)), 3, &request(Command::Pause, 2, None)),
            Err(Refused::Stale { asked: 2, in_force: 3 })
        );
    }

    #[test]
    fn a_request_round_trips_and_garbage_is_refused_never_a_panic() {
        let undo = request(Command::Undo, 7, Some(6));
        assert_eq!(Request::from_data(&undo.to_data()), Ok(undo));
        let huge = "9".repeat(100_000);
        for (command, revision, previous) in [
            ("stop", "2", None),
            ("pause", "two", None),
            ("pause", "-1", None),
            ("pause", "", None),
            ("pause", huge.as_str(), None),
            ("undo", "2", None),
            ("undo", "2", Some("2")),
            ("undo", "2", Some("x")),
        ] {
            let mut data = BTreeMap::from([
                ("command".to_owned(), command.to_owned()),
                ("revision".to_owned(), revision.to_owned()),
            ]);
            if let Some(previous) = previous {
                data.insert("previous".to_owned(), previous.to_owned());
            }
            let refused = Request::from_data(&data).expect_err("refused");
            assert!(refused.to_string().len() < 200, "{refused}");
        }
    }
}
