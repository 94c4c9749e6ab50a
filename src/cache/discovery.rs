//! Resolving the kinds rules declare to API resources through discovery, never guessed plurals.

use std::collections::HashMap;

use kube::Client;
use kube::core::GroupVersionKind;
use kube::discovery::{ApiResource, Scope, pinned_kind};

use crate::engine::rules::RuleSet;

/// A declared kind the API server does not serve.
#[derive(Debug, thiserror::Error)]
#[error("rule {rule:?}: {api_version} {kind} is not served by the API server: {source}")]
pub(crate) struct UnknownKind {
    /// The rule declaring it.
    pub rule: String,
    /// Its apiVersion.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
    /// The discovery error.
    #[source]
    pub source: kube::Error,
}

/// A kind a rule names that discovery has not resolved (the caller resolves before it starts).
#[derive(Debug, thiserror::Error)]
#[error("{api_version} {kind} was not resolved through discovery")]
pub(crate) struct NotResolved {
    /// Its apiVersion.
    pub api_version: String,
    /// Its kind.
    pub kind: String,
}

/// A served kind.
#[derive(Debug, Clone)]
pub(crate) struct ServedKind {
    /// The resource (plural, group, version).
    pub resource: ApiResource,
    /// Whether objects live in namespaces.
    pub namespaced: bool,
}

/// Every kind the current rules use, resolved.
#[derive(Debug, Clone, Default)]
pub(crate) struct Kinds {
    served: HashMap<(String, String), ServedKind>,
}

impl Kinds {
    /// The served kind for `(apiVersion, kind)`, if resolved.
    pub(crate) fn get(&self, api_version: &str, kind: &str) -> Option<&ServedKind> {
        self.served.get(&(api_version.to_owned(), kind.to_owned()))
    }

    /// These kinds and `served` for `(api_version, kind)`, for unit tests.
    #[cfg(test)]
    pub(crate) fn with(mut self, api_version: &str, kind: &str, served: ServedKind) -> Self {
        self.served.insert((api_version.to_owned(), kind.to_owned()), served);
        self
    }

    /// Like [`Kinds::get`], an error when it was not resolved.
    pub(crate) fn resolved(&self, api_version: &str, kind: &str) -> Result<&ServedKind, NotResolved> {
        self.get(api_version, kind).ok_or_else(|| NotResolved {
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
        })
    }

    /// Resolves every watched, owned and looked-up kind of `set`, reusing what is already known.
    /// A rule naming a kind that is not served is returned (its first such kind); the other
    /// rules' kinds are resolved all the same, so one missing CRD holds back only its rules.
    pub(crate) async fn resolve(&mut self, client: &Client, set: &RuleSet) -> Vec<UnknownKind> {
        let mut waiting = Vec::new();
        for rule in &set.rules {
            let watched = (rule.spec.watch.api_version.clone(), rule.spec.watch.kind.clone());
            for (api_version, kind) in std::iter::once(watched)
                .chain(rule.owned_kinds())
                .chain(rule.lookup_kinds())
            {
                if self.get(&api_version, &kind).is_some() {
                    continue;
                }
                let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
                let gvk = GroupVersionKind::gvk(group, version, &kind);
                match pinned_kind(client, &gvk).await {
                    Ok((resource, capabilities)) => {
                        let namespaced = capabilities.scope == Scope::Namespaced;
                        self.served
                            .insert((api_version, kind), ServedKind { resource, namespaced });
                    }
                    Err(source) => {
                        waiting.push(UnknownKind {
                            rule: rule.name.clone(),
                            api_version,
                            kind,
                            source,
                        });
                        break;
                    }
                }
            }
        }
        waiting
    }
}
