//! The requests of `ruleop rollout pause|resume|undo`: each is a ConfigMap `ruleop-rollout-<rule>`
//! of the status namespace (label `ruleop.io/rollout-request: <rule>`), watched here and handed to
//! the reload loop, which decides it (`engine::rollout::control`), records the rollout's new state
//! in `ruleop-status` and then deletes the request, so each is followed once.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tracing::warn;

use crate::engine::rollout::control::{REQUEST_LABEL, Request, request_name};
use crate::records::feed::ConfigMapFeed;

/// One request as the watch saw it.
#[derive(Debug, Clone)]
pub(crate) struct Seen {
    /// The rule it is about (its label).
    pub(crate) rule: String,
    /// Its ConfigMap's name.
    pub(crate) name: String,
    /// Its resourceVersion: the delete that lets it go is held to it, so a newer request made
    /// meanwhile is not lost.
    pub(crate) version: String,
    /// Its data.
    pub(crate) data: BTreeMap<String, String>,
}

/// The watch of the requests; it ends when dropped.
pub(crate) struct Requests {
    api: Api<ConfigMap>,
    feed: ConfigMapFeed<Seen>,
}

impl Requests {
    /// Watches the requests in `namespace`: those made before this process are seen first.
    pub(crate) fn watch(client: Client, namespace: &str) -> Self {
        let api: Api<ConfigMap> = Api::namespaced(client, namespace);
        let config = watcher::Config::default().labels(REQUEST_LABEL);
        let feed = ConfigMapFeed::start(api.clone(), config, "the rollout requests", |config_map| Seen {
            rule: config_map.labels().get(REQUEST_LABEL).cloned().unwrap_or_default(),
            name: config_map.name_any(),
            version: config_map.resource_version().unwrap_or_default(),
            data: config_map.data.unwrap_or_default(),
        });
        Requests { api, feed }
    }

    /// The next request.
    pub(crate) async fn next(&mut self) -> Option<Seen> {
        self.feed.next().await
    }

    /// Lets a followed (or refused) request go. One already gone, or replaced by a newer one,
    /// is left alone.
    pub(crate) async fn done(&self, seen: &Seen) {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                resource_version: Some(seen.version.clone()),
                uid: None,
            }),
            ..DeleteParams::default()
        };
        match self.api.delete(&seen.name, &params).await {
            Ok(_) => {}
            Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {}
            Err(e) => warn!(request = %seen.name, error = %e, "deleting a followed rollout request failed"),
        }
    }
}

/// The field manager of the requests `ruleop rollout` writes.
const CLI_MANAGER: &str = "ruleop-rollout-cli";

/// Writes `request` about `rule` as its ConfigMap (`ruleop-rollout-<rule>`, replacing one not
/// followed yet). Returns the ConfigMap's name, gone once the operator has followed it.
pub(crate) async fn write(api: &Api<ConfigMap>, rule: &str, request: &Request) -> Result<String, kube::Error> {
    let name = request_name(rule);
    let object = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {REQUEST_LABEL: rule, "app.kubernetes.io/managed-by": "ruleop"}},
        "data": request.to_data(),
    });
    api.patch(&name, &PatchParams::apply(CLI_MANAGER).force(), &Patch::Apply(&object))
        .await?;
    Ok(name)
}
