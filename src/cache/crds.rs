//! The live schemas of the kinds rules watch: each custom kind's CustomResourceDefinition, read by
//! name (`<plural>.<group>`, from discovery), so `ruleop run` checks rules against what the API
//! server enforces at every reload, and again whenever a CRD changes.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::{Api, Client};

use super::discovery::Kinds;
use crate::engine::rules::{RuleSet, is_built_in_api};
use crate::engine::schema::Catalog;

/// The schemas read, and what identifies them (CRD names and resource versions): equal
/// fingerprints mean nothing changed since the last check.
#[derive(Debug, Default)]
pub(crate) struct LiveSchemas {
    /// The CRDs' schemas.
    pub catalog: Catalog,
    /// `name@resourceVersion` of every CRD read, sorted.
    pub fingerprint: String,
}

/// The names of the CRDs of the custom kinds `set` watches, as discovery resolved them.
pub(crate) fn crd_names(set: &RuleSet, kinds: &Kinds) -> Vec<String> {
    let mut names: Vec<String> = set
        .rules
        .iter()
        .map(|rule| &rule.spec.watch)
        .filter(|watch| !is_built_in_api(&watch.api_version))
        .filter_map(|watch| kinds.get(&watch.api_version, &watch.kind))
        .map(|served| format!("{}.{}", served.resource.plural, served.resource.group))
        .collect();
    names.sort();
    names.dedup();
    names
}

/// Reads the CRDs of the kinds `set` watches. A CRD that is gone is left out (its rule then
/// has no schema); an API error (no permission, a timeout) fails the read, and the caller
/// goes on without a schema check rather than holding the rules back.
pub(crate) async fn read(client: &Client, set: &RuleSet, kinds: &Kinds) -> Result<LiveSchemas, kube::Error> {
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    let mut live = LiveSchemas::default();
    let mut seen = Vec::new();
    for name in crd_names(set, kinds) {
        let Some(crd) = api.get_opt(&name).await? else {
            continue;
        };
        let version = crd.metadata.resource_version.clone().unwrap_or_default();
        seen.push(format!("{name}@{version}"));
        let value = serde_json::to_value(&crd).unwrap_or_default();
        // The API server stores only structural CRDs; what can differ is a pattern Rust's regex
        // does not read as Go does: that version then goes unchecked, said here.
        for problem in live
            .catalog
            .add_crd(&format!("CustomResourceDefinition/{name}"), &value)
        {
            tracing::warn!(crd = %name, problem = %problem.message, "a CRD's schema cannot be read; its rule's reads are not checked");
        }
    }
    live.fingerprint = seen.join(",");
    live.catalog.sources = vec!["the API server".into()];
    Ok(live)
}
