//! `ruleop-status`: the ConfigMap where users look after editing rules. The reload report's keys
//! (`state`, `errors`, `fingerprint`, `rulesInForce`, `revisions`, `updatedAt`) are written here
//! under ruleop's field manager; the staged rollouts' keys (`rollout.<rule>`) are
//! `records::rollouts`', under a manager of their own. Warning Events about the rules
//! are published on this ConfigMap too.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::Recorder;
use tracing::{debug, warn};

/// Name of the ConfigMap reporting the state of the rules.
pub(crate) const STATUS_CONFIGMAP: &str = "ruleop-status";

/// `Loaded` or `Rejected`.
const KEY_STATE: &str = "state";
/// Every error of the files last rejected, with its location.
const KEY_ERRORS: &str = "errors";
/// The fingerprint of the files last dealt with.
const KEY_FINGERPRINT: &str = "fingerprint";
/// The rules in force, comma-separated.
const KEY_RULES: &str = "rulesInForce";
/// The revision in force of each rule, one `rule: n` line each.
pub(crate) const KEY_REVISIONS: &str = "revisions";
/// When the report was written.
const KEY_UPDATED: &str = "updatedAt";

/// The outcome of the latest (re)load.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum ReloadState {
    /// The rules in force were loaded from the current files.
    Loaded,
    /// The current files are invalid (every error with its location); older rules are in force.
    Rejected(String),
}

/// The revision number in force of each rule, from the `revisions` key (`rule: n` lines; a
/// line saying the revision is not kept still names its number first).
pub(crate) fn revisions_in_force(data: &BTreeMap<String, String>) -> BTreeMap<&str, u64> {
    data.get(KEY_REVISIONS)
        .map(|lines| {
            lines
                .lines()
                .filter_map(|l| l.split_once(": "))
                .filter_map(|(rule, n)| Some((rule, n.split_whitespace().next()?.parse().ok()?)))
                .collect()
        })
        .unwrap_or_default()
}

/// Reads the ConfigMap's data (`None` when it does not exist).
pub(crate) async fn read(api: &Api<ConfigMap>) -> Result<Option<BTreeMap<String, String>>, kube::Error> {
    Ok(api
        .get_opt(STATUS_CONFIGMAP)
        .await?
        .map(|cm| cm.data.unwrap_or_default()))
}

/// A Warning Event on the `ruleop-status` ConfigMap of `namespace`, published in the background.
pub(crate) fn publish_warning(recorder: &Recorder, namespace: &str, reason: &str, action: &str, note: String) {
    let reference = k8s_openapi::api::core::v1::ObjectReference {
        api_version: Some("v1".to_owned()),
        kind: Some("ConfigMap".to_owned()),
        name: Some(STATUS_CONFIGMAP.to_owned()),
        namespace: Some(namespace.to_owned()),
        ..Default::default()
    };
    let event = kube::runtime::events::Event {
        type_: kube::runtime::events::EventType::Warning,
        reason: reason.to_owned(),
        note: Some(crate::engine::diagnostic::bounded(&note, 1000).into_owned()),
        action: action.to_owned(),
        secondary: None,
    };
    let recorder = recorder.clone();
    tokio::spawn(async move {
        if let Err(e) = recorder.publish(&event, &reference).await {
            warn!(error = %e, "publishing an Event failed");
        }
    });
}

/// Writes the reload report's keys of `ruleop-status`.
pub(crate) struct StatusReport {
    api: Api<ConfigMap>,
    /// What the ConfigMap says (state, errors, fingerprint, rules, revisions), once known.
    last: Option<[String; 5]>,
    /// The revision in force of each rule, one `rule: n` line each (see
    /// [`crate::records::revisions::RevisionStore::record`]).
    pub(crate) revisions: String,
}

impl StatusReport {
    /// Writes into `ruleop-status` in `namespace`.
    pub(crate) fn new(client: Client, namespace: &str) -> Self {
        StatusReport {
            api: Api::namespaced(client, namespace),
            last: None,
            revisions: String::new(),
        }
    }

    /// Whether ruleop may write the ConfigMap: a server-side dry run, which is authorized like
    /// the real write but stores nothing.
    async fn check_writable(&self) -> Result<(), kube::Error> {
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": STATUS_CONFIGMAP},
        });
        let params = PatchParams::apply(crate::apply::FIELD_MANAGER).force().dry_run();
        self.api
            .patch(STATUS_CONFIGMAP, &params, &Patch::Apply(&object))
            .await
            .map(drop)
    }

    /// Fails when ruleop may not write the ConfigMap of `namespace` (a server-side dry run
    /// answered 403), naming what to grant; any other failure of the check is only logged.
    pub(crate) async fn ensure_writable(&self, namespace: &str) -> anyhow::Result<()> {
        let Err(e) = self.check_writable().await else {
            return Ok(());
        };
        if matches!(&e, kube::Error::Api(status) if status.code == 403) {
            anyhow::bail!(
                "ruleop may not write the ConfigMap {namespace}/{STATUS_CONFIGMAP}, where it reports the state of the rules ({}). \
                 Grant its ServiceAccount get/create/patch on ConfigMaps in that namespace, or set \
                 --status-namespace (or POD_NAMESPACE) to a namespace where it may",
                crate::engine::diagnostic::bounded(&e.to_string(), 500)
            );
        }
        warn!(error = %e, "cannot check that the {STATUS_CONFIGMAP} ConfigMap is writable");
        Ok(())
    }

    /// Writes the state unless the ConfigMap already says it (a restart over unchanged rules
    /// writes nothing). A failure is logged and returned.
    pub(crate) async fn report(
        &mut self,
        state: ReloadState,
        rules: &str,
        fingerprint: &str,
    ) -> Result<(), kube::Error> {
        let (state, errors) = match state {
            ReloadState::Loaded => ("Loaded", String::new()),
            ReloadState::Rejected(errors) => ("Rejected", errors),
        };
        let said = [
            state.to_owned(),
            errors.clone(),
            fingerprint.to_owned(),
            rules.to_owned(),
            self.revisions.clone(),
        ];
        if self.last.is_none() {
            // After a restart: what is there may already say it.
            if let Ok(Some(data)) = read(&self.api).await {
                self.last = Some(said_in(&data));
            }
        }
        if self.last.as_ref() == Some(&said) {
            debug!(state, "the {STATUS_CONFIGMAP} ConfigMap already says so; not written");
            return Ok(());
        }
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": STATUS_CONFIGMAP, "labels": {"app.kubernetes.io/managed-by": "ruleop"}},
            "data": encode(&said, &crate::records::clock::now_rfc3339()),
        });
        let params = PatchParams::apply(crate::apply::FIELD_MANAGER).force();
        match self.api.patch(STATUS_CONFIGMAP, &params, &Patch::Apply(&object)).await {
            Ok(_) => {
                self.last = Some(said);
                Ok(())
            }
            Err(e) => {
                warn!(error = %e, "writing the {STATUS_CONFIGMAP} ConfigMap failed");
                Err(e)
            }
        }
    }
}

/// What `data` says of the reload: state, errors, fingerprint, rules, revisions.
fn said_in(data: &BTreeMap<String, String>) -> [String; 5] {
    let field = |key: &str| data.get(key).cloned().unwrap_or_default();
    [
        field(KEY_STATE),
        field(KEY_ERRORS),
        field(KEY_FINGERPRINT),
        field(KEY_RULES),
        field(KEY_REVISIONS),
    ]
}

/// The reload report's keys for `said` (as [`said_in`] reads them back), stamped `updated_at`;
/// empty rules and revisions are left out.
fn encode(
    [state, errors, fingerprint, rules, revisions]: &[String; 5],
    updated_at: &str,
) -> BTreeMap<&'static str, String> {
    let mut data = BTreeMap::from([
        (KEY_STATE, state.clone()),
        (KEY_ERRORS, errors.clone()),
        (KEY_FINGERPRINT, fingerprint.clone()),
        (KEY_UPDATED, updated_at.to_owned()),
    ]);
    if !rules.is_empty() {
        data.insert(KEY_RULES, rules.clone());
    }
    if !revisions.is_empty() {
        data.insert(KEY_REVISIONS, revisions.clone());
    }
    data
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_report_reads_back_as_what_it_said() {
        let said = [
            "Rejected".to_owned(),
            "rules/a.yaml:3: bad".to_owned(),
            "f00d".to_owned(),
            "a,b".to_owned(),
            "a: 3\nb: 1 (not kept: forbidden)".to_owned(),
        ];
        let data: BTreeMap<String, String> = encode(&said, "2026-01-01T00:00:00.000000Z")
            .into_iter()
            .map(|(k, v)| (k.to_owned(), v))
            .collect();
        assert_eq!(said_in(&data), said);
        assert_eq!(data["updatedAt"], "2026-01-01T00:00:00.000000Z");
        assert_eq!(revisions_in_force(&data), BTreeMap::from([("a", 3), ("b", 1)]));
    }

    #[test]
    fn empty_rules_and_revisions_are_left_out() {
        let said = [
            "Loaded".to_owned(),
            String::new(),
            "f".to_owned(),
            String::new(),
            String::new(),
        ];
        let data = encode(&said, "now");
        assert!(!data.contains_key(KEY_RULES) && !data.contains_key(KEY_REVISIONS));
        assert!(revisions_in_force(&BTreeMap::new()).is_empty());
    }
}
