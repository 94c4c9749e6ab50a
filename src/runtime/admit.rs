//! One way in for a rule set. Whether the files were loaded at start-up, loaded again on a
//! reload, or a kept revision was read back for a rollout or a pinned parent, the set passes the
//! same numbered steps before anything runs it, and is built whole by them: once admitted it is
//! never changed (it is shared behind an `Arc` from then on).
//!
//! 1. load: the caller's (the files, [`crate::engine::rules::load::load`]; or a kept record,
//!    [`crate::records::revisions::set_of_record`]);
//! 2. resolve every kind through discovery ([`Kinds::resolve`]); a rule in force that names a
//!    kind no longer served refuses the whole set (the rule keeps its last good version);
//! 3. set aside the rules that wait for a kind (they start once a retry finds it served);
//! 4. check each watched kind's scope against discovery and record which children are
//!    cluster-scoped ([`scoped`]);
//! 5. check the rules against the live CRDs of their kinds ([`check_against`]);
//! 6. on going into force, stamp each rule with its revision number
//!    ([`crate::records::revisions::stamped`]).
//!
//! A kept revision takes steps 1, 4 and 6 (its kinds are the rule in force's, resolved and
//! checked when it was in force: [`kept`]).

use std::collections::BTreeSet;
use std::path::Path;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use tracing::warn;

use crate::cache::crds::LiveSchemas;
use crate::cache::discovery::{Kinds, UnknownKind};
use crate::engine::diagnostic::Diagnostics;
use crate::engine::rules::RuleSet;

/// A rule set that passed every step, ready to go into force.
#[derive(Debug)]
pub(crate) struct Admitted {
    /// The rules (those waiting for a kind set aside), their kinds' scopes recorded.
    pub(crate) set: RuleSet,
    /// Every kind of the set, resolved.
    pub(crate) kinds: Kinds,
    /// The rules set aside until their kind is served.
    pub(crate) waiting: Vec<UnknownKind>,
    /// The CRDs (names and resource versions) the set was checked against.
    pub(crate) schemas: String,
}

/// Why a rule set was not admitted, one variant per step that refuses.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Refused {
    /// Step 1: the files do not load (every error with its location).
    #[error("{0}")]
    Invalid(Diagnostics),
    /// Step 2: a rule in force names a kind the API server does not serve.
    #[error("{}", .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n"))]
    KindsInForce(Vec<UnknownKind>),
    /// Step 4: a watched kind's scope is not the rule's.
    #[error(transparent)]
    Scope(#[from] ScopeMismatch),
    /// Step 5: the rules do not match the live CRDs.
    #[error("{diagnostics}")]
    Schemas {
        /// Every located problem.
        diagnostics: Diagnostics,
        /// The CRDs checked against.
        schemas: String,
    },
}

impl Refused {
    /// The error that stops `ruleop run` when the rules it starts with are refused.
    pub(crate) fn at_start_up(self) -> anyhow::Error {
        match self {
            Refused::Invalid(d) => anyhow::anyhow!("the rules are invalid:\n{d}"),
            Refused::Schemas { diagnostics, .. } => {
                anyhow::anyhow!("the rules do not match the CRDs the API server serves:\n{diagnostics}")
            }
            other => anyhow::Error::new(other),
        }
    }
}

/// A rule's `watch.scope` is not what discovery says of its kind.
#[derive(Debug, thiserror::Error)]
#[error("rule {rule:?}: watched kind {api_version} {kind} is {served}, but the rule's watch.scope is {declared}")]
pub(crate) struct ScopeMismatch {
    /// The rule.
    pub(crate) rule: String,
    /// Its watched apiVersion.
    pub(crate) api_version: String,
    /// Its watched kind.
    pub(crate) kind: String,
    /// What discovery says: `namespaced` or `cluster-scoped`.
    pub(crate) served: &'static str,
    /// What the rule says, and how to fix it.
    pub(crate) declared: &'static str,
}

/// Steps 2 to 5 for `loaded` (step 1), with the kinds known so far (`known`) and the rules in
/// force (`in_force`, by name; none at start-up).
pub(crate) async fn admit(
    client: &Client,
    loaded: RuleSet,
    known: Kinds,
    in_force: &BTreeSet<String>,
    templates: &Path,
) -> Result<Admitted, Refused> {
    // 2. Discovery. The kind may be served later (its CRD applied after the rule): a rule in
    // force keeps its last good version meanwhile, so the whole set waits; a new rule waits alone.
    let mut kinds = known;
    let waiting = kinds.resolve(client, &loaded).await;
    if waiting.iter().any(|w| in_force.contains(&w.rule)) {
        return Err(Refused::KindsInForce(waiting));
    }
    // 3. Set aside.
    let set = set_aside(loaded, &waiting);
    // 4. Scopes.
    let set = scoped(set, &kinds)?;
    // 5. The live CRDs.
    let live = read_live_schemas(client, &set, &kinds).await;
    match check_against(&set, &live, templates) {
        Ok(()) => Ok(Admitted {
            set,
            kinds,
            waiting,
            schemas: live.fingerprint,
        }),
        Err(diagnostics) => Err(Refused::Schemas {
            diagnostics,
            schemas: live.fingerprint,
        }),
    }
}

/// The rule set of kept revision `number` of `rule` (from the ConfigMaps `kept`): its record
/// loaded (step 1, stamped with its number: step 6), its kinds' scopes from discovery (step 4).
pub(crate) async fn kept(kept: &Api<ConfigMap>, rule: &str, number: u64, kinds: &Kinds) -> Result<RuleSet, String> {
    let record = crate::records::revisions::read_record(kept, rule, number).await?;
    let set = crate::records::revisions::set_of_record(&record)?;
    scoped(set, kinds).map_err(|e| e.to_string())
}

/// Step 3: `set` without the rules that wait for a kind.
fn set_aside(set: RuleSet, waiting: &[UnknownKind]) -> RuleSet {
    for unknown in waiting {
        warn!(rule = %unknown.rule, error = %unknown, "the rule waits until its kind is served; the other rules run");
    }
    let rules = set
        .rules
        .into_iter()
        .filter(|rule| !waiting.iter().any(|w| w.rule == rule.name))
        .collect();
    RuleSet { rules, ..set }
}

/// Step 4: a rule's `watch.scope` must be what discovery says of its kind (a rule reacting to
/// cluster-scoped objects says so); records which child and action kinds are cluster-scoped,
/// so planning places them right.
pub(crate) fn scoped(set: RuleSet, kinds: &Kinds) -> Result<RuleSet, ScopeMismatch> {
    let rules = set
        .rules
        .into_iter()
        .map(|mut rule| {
            let watch = &rule.spec.watch;
            if let Some(kind) = kinds.get(&watch.api_version, &watch.kind)
                && kind.namespaced == rule.has_cluster_scoped_parents()
            {
                return Err(ScopeMismatch {
                    rule: rule.name.clone(),
                    api_version: watch.api_version.clone(),
                    kind: watch.kind.clone(),
                    served: if kind.namespaced {
                        "namespaced"
                    } else {
                        "cluster-scoped"
                    },
                    declared: if kind.namespaced {
                        "Cluster"
                    } else {
                        "Namespaced (write `scope: Cluster`)"
                    },
                });
            }
            // The rule is built here, before the set is: nothing shares it yet.
            rule.set_scopes(|api_version, kind| kinds.get(api_version, kind).map(|k| !k.namespaced));
            Ok(rule)
        })
        .collect::<Result<Vec<_>, _>>()?;
    Ok(RuleSet { rules, ..set })
}

/// The live CRDs of `set`'s watched kinds. CRDs that cannot be read are logged and not held
/// against the rules (the API server still validates every write): an empty catalog.
pub(crate) async fn read_live_schemas(client: &Client, set: &RuleSet, kinds: &Kinds) -> LiveSchemas {
    crate::cache::crds::read(client, set, kinds).await.unwrap_or_else(|e| {
        warn!(error = %e, "cannot read the CRDs of the watched kinds; the rules are not checked against their schemas");
        LiveSchemas::default()
    })
}

/// Step 5: `set` against CRDs already read: every located problem (kinds with no schema are
/// logged).
pub(crate) fn check_against(set: &RuleSet, live: &LiveSchemas, templates: &Path) -> Result<(), Diagnostics> {
    let report = crate::engine::schema_check::rule_check::check(set, &live.catalog, templates);
    for warning in &report.warnings {
        warn!(%warning, "a rule is not checked against a schema");
    }
    if report.errors.is_empty() {
        Ok(())
    } else {
        Err(Diagnostics(report.errors))
    }
}

#[cfg(test)]
mod tests {
    use kube::discovery::ApiResource;

    use super::*;
    use crate::cache::discovery::ServedKind;

    fn rule(scope: &str) -> RuleSet {
        crate::engine::rules::load::one_rule(
            "r",
            &format!(
                "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {{name: r}}\nspec:\n  watch: {{apiVersion: example.com/v1, kind: R{scope}}}\n"
            ),
        )
    }

    fn served(namespaced: bool) -> Kinds {
        let resource = ApiResource {
            group: "example.com".to_owned(),
            version: "v1".to_owned(),
            api_version: "example.com/v1".to_owned(),
            kind: "R".to_owned(),
            plural: "rs".to_owned(),
        };
        Kinds::default().with("example.com/v1", "R", ServedKind { resource, namespaced })
    }

    #[test]
    fn a_watch_scope_that_discovery_contradicts_is_refused_and_names_the_fix() {
        let refused = scoped(rule(""), &served(false)).expect_err("cluster-scoped kind, namespaced rule");
        assert_eq!(
            refused.to_string(),
            "rule \"r\": watched kind example.com/v1 R is cluster-scoped, but the rule's watch.scope is Namespaced (write `scope: Cluster`)"
        );
        assert!(scoped(rule(""), &served(true)).is_ok());
        assert!(scoped(rule(", scope: Cluster"), &served(true)).is_err());
        assert!(
            scoped(rule(""), &Kinds::default()).is_ok(),
            "an unresolved kind is not judged"
        );
    }

    #[test]
    fn the_rules_waiting_for_a_kind_are_set_aside_and_the_others_kept() {
        let waiting = vec![UnknownKind {
            rule: "r".to_owned(),
            api_version: "example.com/v1".to_owned(),
            kind: "R".to_owned(),
            source: kube::Error::Service("not served".into()),
        }];
        assert!(set_aside(rule(""), &waiting).rules.is_empty());
        assert_eq!(set_aside(rule(""), &[]).rules.len(), 1);
    }
}
