//! Writes the state of each staged rollout into `ruleop-status` (key `rollout.<rule>`), where
//! users already look after an edit, under a field manager of its own, so the reload report's
//! writes and these leave each other's keys alone.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use tracing::warn;

use crate::runtime::run::STATUS_CONFIGMAP;

/// The field manager of the `rollout.<rule>` keys.
const MANAGER: &str = "ruleop-rollouts";

/// The rollouts' part of `ruleop-status`.
pub(crate) struct RolloutReport {
    api: Api<ConfigMap>,
    /// Rule -> what its key says. Every write sends them all: a key this manager stops sending
    /// would be removed by server-side apply.
    said: BTreeMap<String, String>,
}

impl RolloutReport {
    /// Writes into `ruleop-status` in `namespace`.
    pub(crate) fn new(client: Client, namespace: &str) -> Self {
        RolloutReport {
            api: Api::namespaced(client, namespace),
            said: BTreeMap::new(),
        }
    }

    /// The states recorded before this process (rule -> text), which later writes keep sending.
    pub(crate) async fn read_back(&mut self) -> BTreeMap<String, String> {
        match self.api.get_opt(STATUS_CONFIGMAP).await {
            Ok(existing) => {
                let data = existing.and_then(|cm| cm.data).unwrap_or_default();
                self.said = crate::runtime::rollout_resume::rollout_states(data);
                self.said.clone()
            }
            Err(e) => {
                warn!(error = %e, "cannot read the rollouts' state back from {STATUS_CONFIGMAP}");
                BTreeMap::new()
            }
        }
    }

    /// What another replica recorded (`states`, from a watch), which this one's writes then
    /// keep sending when it takes over the rollouts.
    pub(crate) fn heard(&mut self, states: BTreeMap<String, String>) {
        self.said = states;
    }

    /// The recorded state of `rule`'s rollout, as last written or heard.
    pub(crate) fn on_record(&self, rule: &str) -> Option<&String> {
        self.said.get(rule)
    }

    /// Records `text` as the state of `rule`'s rollout. Returns whether it is on record; a
    /// failure is logged, and the next write of any rule sends it again.
    pub(crate) async fn write(&mut self, rule: &str, text: String) -> bool {
        if self.said.get(rule) == Some(&text) {
            return true;
        }
        let mut said = self.said.clone();
        said.insert(rule.to_owned(), text);
        let data: BTreeMap<String, &String> = said
            .iter()
            .map(|(rule, text)| (format!("rollout.{rule}"), text))
            .collect();
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": STATUS_CONFIGMAP},
            "data": data,
        });
        let params = PatchParams::apply(MANAGER).force();
        match self.api.patch(STATUS_CONFIGMAP, &params, &Patch::Apply(&object)).await {
            Ok(_) => {
                self.said = said;
                true
            }
            Err(e) => {
                warn!(rule, error = %e, "writing the rollout state into {STATUS_CONFIGMAP} failed");
                false
            }
        }
    }
}
