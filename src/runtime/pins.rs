//! Parents pinned to a kept revision (`ruleop.io/revision: "<n>"`): the kept revisions each rule
//! may be pinned to, and their rule sets, loaded from their kept ConfigMaps the first time a
//! parent asks and held while the revision is kept. The annotation is a tenant's: which revision
//! it names is decided by the engine (`select::Revisions::for_parent`), and only a revision of
//! the same rule that watches, owns and looks up the same kinds as the rule in force is served,
//! so a pin reaches nothing the running controllers do not already watch.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;

use crate::cache::discovery::Kinds;
use crate::engine::rules::{Rule, RuleSet};

/// Why a kept revision cannot be served to a pinned parent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum Unservable {
    /// Its record does not load.
    #[error("annotation ruleop.io/revision: revision {revision} of rule {rule:?} is kept but does not load: {why}")]
    DoesNotLoad {
        /// The rule.
        rule: String,
        /// The revision.
        revision: u64,
        /// Why.
        why: String,
    },
    /// It watches, owns or looks up other kinds than the rule in force.
    #[error(
        "annotation ruleop.io/revision: revision {revision} of rule {rule:?} watches, owns or looks up other kinds than the rule in force, so it cannot be served; pin a later revision or remove the annotation"
    )]
    OtherKinds {
        /// The rule.
        rule: String,
        /// The revision.
        revision: u64,
    },
}

impl Unservable {
    /// The reason of the parent's Ready=False condition and Event.
    pub(crate) fn reason(&self) -> &'static str {
        "RevisionNotServable"
    }
}

/// The kept revisions and the loaded sets of pinned ones.
pub(crate) struct Pins {
    api: Api<ConfigMap>,
    /// Rule -> the numbers of its kept revisions.
    kept: RwLock<BTreeMap<String, BTreeSet<u64>>>,
    /// `(rule, revision)` -> its rule set, for kept revisions only.
    loaded: tokio::sync::Mutex<BTreeMap<(String, u64), Arc<RuleSet>>>,
}

impl Pins {
    /// Kept revisions are read from the ConfigMaps of `namespace` (the status namespace).
    pub(crate) fn new(client: Client, namespace: &str) -> Self {
        Pins {
            api: Api::namespaced(client, namespace),
            kept: RwLock::new(BTreeMap::new()),
            loaded: tokio::sync::Mutex::new(BTreeMap::new()),
        }
    }

    /// The kept revisions now (after each recording): loaded sets of revisions no longer kept are
    /// let go.
    pub(crate) async fn set_kept(&self, kept: BTreeMap<String, BTreeSet<u64>>) {
        self.loaded
            .lock()
            .await
            .retain(|(rule, n), _| kept.get(rule).is_some_and(|k| k.contains(n)));
        match self.kept.write() {
            Ok(mut guard) => *guard = kept,
            Err(poisoned) => *poisoned.into_inner() = kept,
        }
    }

    /// The kept revisions of `rule`.
    pub(crate) fn kept(&self, rule: &str) -> BTreeSet<u64> {
        let guard = self.kept.read().unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.get(rule).cloned().unwrap_or_default()
    }

    /// The rule set of kept revision `revision` of `in_force`'s rule, loaded once.
    pub(crate) async fn set_of(
        &self,
        in_force: &Rule,
        revision: u64,
        kinds: &Kinds,
    ) -> Result<Arc<RuleSet>, Unservable> {
        let key = (in_force.name.clone(), revision);
        let mut loaded = self.loaded.lock().await;
        if let Some(set) = loaded.get(&key) {
            return Ok(set.clone());
        }
        let set = crate::runtime::admit::kept(&self.api, &in_force.name, revision, kinds)
            .await
            .map_err(|why| Unservable::DoesNotLoad {
                rule: in_force.name.clone(),
                revision,
                why: crate::engine::diagnostic::bounded(&why, 300).into_owned(),
            })?;
        let same_kinds = set
            .rule(&in_force.name)
            .is_some_and(|pinned| same_kinds(pinned, in_force));
        if !same_kinds {
            return Err(Unservable::OtherKinds {
                rule: in_force.name.clone(),
                revision,
            });
        }
        let set = Arc::new(set);
        loaded.insert(key, set.clone());
        Ok(set)
    }
}

/// Whether two rules watch, own and look up the same kinds: then one's parents and children are
/// what the other's controller watches (and what RBAC grants).
pub(crate) fn same_kinds(a: &Rule, b: &Rule) -> bool {
    a.spec.watch.api_version == b.spec.watch.api_version
        && a.spec.watch.kind == b.spec.watch.kind
        && a.owned_kinds() == b.owned_kinds()
        && a.lookup_kinds() == b.lookup_kinds()
}
