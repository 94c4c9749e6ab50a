//! `spec.rollout` validated: percents checked, pauses parsed, the watched condition resolved.
//! Every problem is located at the value it is about, so `ruleop check` prints file:line:col.

use std::time::Duration;

use crate::engine::duration;
use crate::engine::rules::model::{Located, OnFailure, RolloutSpec, StatusSpec};

/// The condition a rollout watches when the rule names none: the one the engine always manages.
pub const DEFAULT_CONDITION: &str = "Ready";

/// The shortest pause a step may ask for.
pub const MIN_PAUSE: Duration = Duration::from_secs(1);

/// The most steps a rollout may have: more says nothing a shorter list cannot.
pub const MAX_STEPS: usize = 20;

/// A valid `spec.rollout`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// The steps in order; percents increase and the last is 100.
    pub steps: Vec<Step>,
    /// How many moved parents may stop being ready during a pause before the rollout halts.
    pub max_failures: u32,
    /// What a halt does with the moved parents.
    pub on_failure: OnFailure,
    /// The condition type that says a parent is healthy.
    pub condition: String,
}

/// One step: the share of parents on the new revision, and how long it is watched.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step {
    /// 1 to 100.
    pub percent: u8,
    /// Zero only on the last step when it names none.
    pub pause: Duration,
}

impl Rollout {
    /// One step of 100%: what an undone rule without `spec.rollout` is held by (it never steps:
    /// an undone rollout stays until the files change).
    pub fn all_at_once() -> Rollout {
        Rollout {
            steps: vec![Step {
                percent: 100,
                pause: Duration::ZERO,
            }],
            max_failures: 0,
            on_failure: OnFailure::Halt,
            condition: DEFAULT_CONDITION.to_owned(),
        }
    }

    /// One line for people: `10% (pause 1m), then 100%; halts after more than 0 failures of
    /// Ready, moved parents stay`.
    pub fn describe(&self) -> String {
        let steps: Vec<String> = self
            .steps
            .iter()
            .map(|step| match jiff::SignedDuration::try_from(step.pause) {
                Ok(pause) if !pause.is_zero() => format!("{}% (pause {pause:#})", step.percent),
                _ => format!("{}%", step.percent),
            })
            .collect();
        let after = match self.on_failure {
            OnFailure::Halt => "moved parents stay",
            OnFailure::Rollback => "moved parents roll back",
        };
        format!(
            "a change of this rule reaches {}; it halts after more than {} failure(s) of {}, {after}",
            steps.join(", then "),
            self.max_failures,
            self.condition
        )
    }
}

/// One thing wrong with a `spec.rollout`, at the value it is about.
#[derive(Debug)]
pub(crate) struct Problem {
    /// Where in the rule file.
    pub(crate) at: serde_saphyr::Location,
    /// What is wrong.
    pub(crate) message: String,
    /// What to write instead.
    pub(crate) hint: &'static str,
}

impl Problem {
    fn new(at: serde_saphyr::Location, message: String, hint: &'static str) -> Self {
        Problem { at, message, hint }
    }
}

/// Checks a `spec.rollout` against the rule's status (the watched condition must be one the
/// rule writes) and gives the policy, or every problem found.
pub(crate) fn validate(
    spec: &Located<RolloutSpec>,
    status: &StatusSpec,
    writes_status: bool,
) -> Result<Rollout, Vec<Problem>> {
    let mut problems = Vec::new();
    let rollout = &spec.value;
    if !writes_status {
        problems.push(Problem::new(
            spec.referenced,
            "spec.rollout: this rule writes no status, so no condition can tell a moved parent failed".to_owned(),
            "roll out rules that write their parents' status, or remove spec.rollout",
        ));
    }
    if rollout.steps.is_empty() {
        problems.push(Problem::new(
            spec.referenced,
            "spec.rollout.steps is empty".to_owned(),
            "write e.g. steps: [{percent: 10, pause: 5m}, {percent: 100}]",
        ));
    }
    if rollout.steps.len() > MAX_STEPS {
        problems.push(Problem::new(
            spec.referenced,
            format!(
                "spec.rollout.steps has {} steps, at most {MAX_STEPS}",
                rollout.steps.len()
            ),
            "fewer, larger steps",
        ));
    }
    let mut steps = Vec::with_capacity(rollout.steps.len());
    let mut previous: Option<u32> = None;
    for (i, step) in rollout.steps.iter().enumerate() {
        let last = i + 1 == rollout.steps.len();
        let percent = &step.value.percent;
        if !(1..=100).contains(&percent.value) {
            problems.push(Problem::new(
                percent.referenced,
                format!("spec.rollout.steps[{i}].percent is {}, not 1 to 100", percent.value),
                "a step moves a share of the parents: 1 to 100",
            ));
        } else if previous.is_some_and(|p| percent.value <= p) {
            problems.push(Problem::new(
                percent.referenced,
                format!(
                    "spec.rollout.steps[{i}].percent is {}, not more than the step before ({})",
                    percent.value,
                    previous.unwrap_or_default()
                ),
                "percents increase from step to step",
            ));
        }
        if last && percent.value != 100 {
            problems.push(Problem::new(
                percent.referenced,
                format!("spec.rollout: the last step is {}%, not 100%", percent.value),
                "end with {percent: 100} so every parent gets the new revision",
            ));
        }
        // An out-of-range percent is reported once, not again as the next step's predecessor.
        previous = (1..=100).contains(&percent.value).then_some(percent.value).or(previous);
        let pause = match &step.value.pause {
            Some(pause) => match duration::parse_at_least(&pause.value, MIN_PAUSE) {
                Ok(d) => d,
                Err(e) => {
                    problems.push(Problem::new(
                        pause.referenced,
                        format!("spec.rollout.steps[{i}].pause: {e}"),
                        "write e.g. 30s, 5m or 1h (at least 1s)",
                    ));
                    Duration::ZERO
                }
            },
            None if last => Duration::ZERO,
            None => {
                problems.push(Problem::new(
                    step.referenced,
                    format!("spec.rollout.steps[{i}] has no pause"),
                    "every step but the last waits before the next: add e.g. pause: 5m",
                ));
                Duration::ZERO
            }
        };
        steps.push(Step {
            percent: u8::try_from(percent.value.min(100)).unwrap_or(100),
            pause,
        });
    }
    let condition = match &rollout.condition {
        None => DEFAULT_CONDITION.to_owned(),
        Some(named) => {
            let known = named.value == DEFAULT_CONDITION || status.conditions.iter().any(|c| c.type_ == named.value);
            if !known {
                problems.push(Problem::new(
                    named.referenced,
                    format!(
                        "spec.rollout.condition {:?} is not a condition this rule writes",
                        crate::engine::diagnostic::bounded(&named.value, 64)
                    ),
                    "name Ready or a type defined in status.conditions",
                ));
            }
            named.value.clone()
        }
    };
    if problems.is_empty() {
        Ok(Rollout {
            steps,
            max_failures: rollout.max_failures,
            on_failure: rollout.on_failure,
            condition,
        })
    } else {
        Err(problems)
    }
}

/// 10% with a pause of a minute, then 100%, on the Ready condition: the rollout the unit tests
/// of selection and staging share.
#[cfg(test)]
pub(crate) fn ten_then_all(max_failures: u32, on_failure: crate::engine::rules::model::OnFailure) -> Rollout {
    Rollout {
        steps: vec![
            Step {
                percent: 10,
                pause: std::time::Duration::from_secs(60),
            },
            Step {
                percent: 100,
                pause: std::time::Duration::ZERO,
            },
        ],
        max_failures,
        on_failure,
        condition: "Ready".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_policy_reads_as_one_line() {
        let rollout = Rollout {
            steps: vec![
                Step {
                    percent: 10,
                    pause: Duration::from_secs(90),
                },
                Step {
                    percent: 100,
                    pause: Duration::ZERO,
                },
            ],
            max_failures: 2,
            on_failure: OnFailure::Rollback,
            condition: DEFAULT_CONDITION.to_owned(),
        };
        assert_eq!(
            rollout.describe(),
            "a change of this rule reaches 10% (pause 1m 30s), then 100%; it halts after more than 2 failure(s) of Ready, moved parents roll back"
        );
    }
}
