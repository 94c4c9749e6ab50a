//! The reload loop's decisions as pure functions of what it found: whether a tick loads the
//! files at all ([`look`]), what an admission leads to (swap, reject, retry, wait: [`decide`]),
//! what a check of the rules in force against changed CRDs reports ([`recheck`]), and the
//! backoff between retries ([`next_retry`]). The `Reloader` (`reloader.rs`) carries them out.

use std::time::Duration;

use crate::runtime::admit::{Admitted, Refused};

/// The first wait before retrying a rule set that failed for a reason outside its files (a kind
/// not served yet, a controller that did not start); it doubles up to [`RETRY_MAX`].
pub(crate) const RETRY_MIN: Duration = Duration::from_secs(1);
/// The longest wait between retries: a CRD created after its rule takes effect within this.
pub(crate) const RETRY_MAX: Duration = Duration::from_secs(10);

/// What a failed check against the live CRDs refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SchemaRejection {
    /// An edit of the files: it is loaded again when a CRD changes.
    Files,
    /// The rules in force, after a CRD changed: they keep running, reported Rejected.
    InForce,
}

/// What a reload tick does when the files are as they were last dealt with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Look {
    /// Nothing changed.
    Nothing,
    /// A CRD changed: check the rules in force against it.
    RecheckInForce,
    /// A CRD changed and the files were refused against the older ones: load them again.
    Load,
}

/// With the files unchanged: whether the CRDs changed since the last check, and what the last
/// check refused, decide the tick.
pub(crate) fn look(crds_changed: bool, rejected: Option<SchemaRejection>) -> Look {
    match (crds_changed, rejected) {
        (false, _) => Look::Nothing,
        (true, Some(SchemaRejection::Files)) => Look::Load,
        (true, _) => Look::RecheckInForce,
    }
}

/// What a reload does with an admission's outcome.
#[derive(Debug)]
pub(crate) enum Decision {
    /// Put the set in force. Reported Loaded, or, when rules were set aside (`wait`), reported
    /// waiting for their kinds and retried with backoff.
    Swap {
        /// The set.
        admitted: Box<Admitted>,
        /// Rules wait for a kind.
        wait: bool,
    },
    /// The files are refused for their content: recorded as dealt with, not retried until they
    /// change; the last good rules keep running.
    Reject {
        /// Why.
        refused: Refused,
        /// Refused by the live CRDs: loaded again when one changes.
        by_schemas: bool,
    },
    /// A failure that may pass: reported, retried with backoff, the last good rules running.
    Retry(Refused),
}

/// The decision over an admission's outcome.
pub(crate) fn decide(admission: Result<Admitted, Refused>) -> Decision {
    match admission {
        Ok(admitted) => Decision::Swap {
            wait: !admitted.waiting.is_empty(),
            admitted: Box::new(admitted),
        },
        Err(refused @ Refused::KindsInForce(_)) => Decision::Retry(refused),
        Err(refused @ Refused::Schemas { .. }) => Decision::Reject {
            refused,
            by_schemas: true,
        },
        Err(refused @ (Refused::Invalid(_) | Refused::Scope(_))) => Decision::Reject {
            refused,
            by_schemas: false,
        },
    }
}

/// What a check of the rules in force against changed CRDs reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recheck {
    /// They no longer match: reported Rejected (they keep running: there is nothing better).
    Rejected,
    /// They match again after a failed check: reported Loaded again.
    LoadedAgain,
    /// They matched and still do: nothing to say.
    Nothing,
}

/// The report of a check of the rules in force (`passed`), after what the last check refused.
pub(crate) fn recheck(passed: bool, rejected: Option<SchemaRejection>) -> Recheck {
    match (passed, rejected) {
        (false, _) => Recheck::Rejected,
        (true, Some(_)) => Recheck::LoadedAgain,
        (true, None) => Recheck::Nothing,
    }
}

/// The wait before the next retry, after the wait that led to this one (none at the first).
pub(crate) fn next_retry(last: Option<Duration>) -> Duration {
    last.map_or(RETRY_MIN, |last| (last * 2).min(RETRY_MAX))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cache::discovery::{Kinds, UnknownKind};
    use crate::engine::diagnostic::Diagnostics;
    use crate::runtime::admit::ScopeMismatch;

    fn admitted(waiting: usize) -> Result<Admitted, Refused> {
        Ok(Admitted {
            set: crate::engine::rules::load::one_rule(
                "r",
                "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {name: r}\nspec:\n  watch: {apiVersion: example.com/v1, kind: R}\n",
            ),
            kinds: Kinds::default(),
            waiting: (0..waiting).map(|_| unknown()).collect(),
            schemas: String::new(),
        })
    }

    fn unknown() -> UnknownKind {
        UnknownKind {
            rule: "w".to_owned(),
            api_version: "example.com/v1".to_owned(),
            kind: "W".to_owned(),
            source: kube::Error::Service("not served".into()),
        }
    }

    #[test]
    fn an_admission_leads_to_a_swap_a_wait_a_rejection_or_a_retry() {
        let scope = ScopeMismatch {
            rule: "r".to_owned(),
            api_version: "example.com/v1".to_owned(),
            kind: "R".to_owned(),
            served: "namespaced",
            declared: "Cluster",
        };
        // What each outcome leads to, in short: `swap`, `wait`, `reject`, `reject by schemas`, `retry`.
        let short = |decision: Decision| match decision {
            Decision::Swap { wait: false, .. } => "swap",
            Decision::Swap { wait: true, .. } => "wait",
            Decision::Reject { by_schemas: false, .. } => "reject",
            Decision::Reject { by_schemas: true, .. } => "reject by schemas",
            Decision::Retry(_) => "retry",
        };
        let table = [
            (admitted(0), "swap"),
            (admitted(1), "wait"),
            (Err(Refused::Invalid(Diagnostics(Vec::new()))), "reject"),
            (Err(Refused::Scope(scope)), "reject"),
            (
                Err(Refused::Schemas {
                    diagnostics: Diagnostics(Vec::new()),
                    schemas: "crd@1".to_owned(),
                }),
                "reject by schemas",
            ),
            (Err(Refused::KindsInForce(vec![unknown()])), "retry"),
        ];
        for (admission, expected) in table {
            let shown = format!("{admission:?}");
            assert_eq!(short(decide(admission)), expected, "{shown}");
        }
    }

    #[test]
    fn unchanged_files_are_loaded_again_only_when_a_crd_changed_under_files_it_refused() {
        use SchemaRejection::{Files, InForce};
        let table = [
            (false, None, Look::Nothing),
            (false, Some(Files), Look::Nothing),
            (false, Some(InForce), Look::Nothing),
            (true, None, Look::RecheckInForce),
            (true, Some(InForce), Look::RecheckInForce),
            (true, Some(Files), Look::Load),
        ];
        for (crds_changed, rejected, expected) in table {
            assert_eq!(look(crds_changed, rejected), expected, "{crds_changed} {rejected:?}");
        }
    }

    #[test]
    fn the_rules_in_force_are_reported_rejected_by_a_failed_check_and_loaded_once_it_passes() {
        use SchemaRejection::InForce;
        let table = [
            (false, None, Recheck::Rejected),
            (false, Some(InForce), Recheck::Rejected),
            (true, Some(InForce), Recheck::LoadedAgain),
            (true, None, Recheck::Nothing),
        ];
        for (passed, rejected, expected) in table {
            assert_eq!(recheck(passed, rejected), expected, "{passed} {rejected:?}");
        }
    }

    #[test]
    fn retries_back_off_from_a_second_to_ten() {
        let mut last = None;
        let waits: Vec<u64> = (0..6)
            .map(|_| {
                let wait = next_retry(last);
                last = Some(wait);
                wait.as_secs()
            })
            .collect();
        assert_eq!(waits, [1, 2, 4, 8, 10, 10]);
    }
}
