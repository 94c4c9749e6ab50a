//! `ruleop status`: the operator as the cluster sees it, read-only: the last reload (the
//! `ruleop-status` ConfigMap), who leads and which shards are held (the Leases), and per rule its
//! parents by `Ready`, the ones that are not Ready the longest, and the ones ruleop has not
//! caught up with (observedGeneration behind generation).

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::{Api, Client};
use serde::Serialize;
use serde_json::Value;

use crate::cache::discovery::Kinds;
use crate::engine::diagnostic::bounded;
use crate::engine::rules::RuleSet;
use crate::inspect::tenant_text::clean;
use crate::offline::Sources;

/// Parents listed per rule as failing or behind.
const LISTED: usize = 5;

/// What `ruleop status` reports.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Status {
    /// The `ruleop-status` ConfigMap: state, rules in force, errors, fingerprint, updatedAt.
    pub reload: BTreeMap<String, String>,
    /// Leases of ruleop in the status namespace: name → holder (empty: nobody holds it).
    pub leases: BTreeMap<String, String>,
    /// Per rule, in file order.
    pub rules: Vec<RuleStatus>,
}

/// One rule's parents.
#[derive(Debug, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct RuleStatus {
    /// The rule's name.
    pub name: String,
    /// `apiVersion kind` it watches.
    pub watches: String,
    /// Parents by their `Ready` status (`True`, `False`, `Unknown`, `None` when not set yet).
    pub ready: BTreeMap<String, usize>,
    /// Not Ready parents, the longest not Ready first: `namespace/name`, since when, reason, message.
    pub failing: Vec<Parent>,
    /// Parents whose latest spec ruleop has not reconciled yet (observedGeneration < generation).
    pub behind: Vec<Parent>,
    /// Why the parents could not be listed.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// A parent worth naming.
#[derive(Debug, Clone, Default, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct Parent {
    /// `namespace/name`.
    pub name: String,
    /// The Ready condition's lastTransitionTime (or the generations, for one behind).
    pub since: String,
    /// The Ready condition's reason.
    pub reason: String,
    /// Its message (at most 200 bytes).
    pub message: String,
}

/// Where to look and how to print it.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Namespace of the `ruleop-status` ConfigMap and the Leases.
    pub status_namespace: String,
    /// Only parents in this namespace (default: all).
    pub namespace: Option<String>,
    /// JSON instead of text.
    pub json: bool,
}

/// `ruleop status`; returns the exit code (0 everything Ready and the last reload Loaded, 1 not,
/// 2 on error).
pub(crate) fn command(sources: &Sources, options: &Options) -> u8 {
    let Some(set) = crate::inspect::live::load_rules(sources, "rules") else {
        return 2;
    };
    let Some(runtime) = crate::inspect::live::runtime() else {
        return 2;
    };
    match runtime.block_on(read(&set, options)) {
        Ok(status) => {
            if options.json {
                println!("{}", serde_json::to_string_pretty(&status).unwrap_or_default());
            } else {
                print!("{}", text(&status, &options.status_namespace));
            }
            u8::from(!healthy(&status))
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    }
}

/// Whether the last reload was loaded and every parent is Ready.
pub(crate) fn healthy(status: &Status) -> bool {
    status.reload.get("state").is_some_and(|s| s == "Loaded")
        && status
            .rules
            .iter()
            .all(|r| r.error.is_none() && r.ready.iter().all(|(state, n)| state == "True" || *n == 0))
}

async fn read(set: &RuleSet, options: &Options) -> anyhow::Result<Status> {
    let (client, kinds) = crate::inspect::live::connect(set).await?;
    read_with(&client, &kinds, set, options).await
}

/// The status as read with a connected client (the console shares it).
pub(crate) async fn read_with(
    client: &Client,
    kinds: &Kinds,
    set: &RuleSet,
    options: &Options,
) -> anyhow::Result<Status> {
    let status_namespace = options.status_namespace.as_str();
    let mut status = Status::default();
    let config_maps: Api<ConfigMap> = Api::namespaced(client.clone(), status_namespace);
    let reload = config_maps
        .get_opt(crate::records::status::STATUS_CONFIGMAP)
        .await
        .with_context(|| {
            format!(
                "reading {status_namespace}/{}",
                crate::records::status::STATUS_CONFIGMAP
            )
        })?;
    status.reload = reload.and_then(|c| c.data).unwrap_or_default().into_iter().collect();
    let leases: Api<Lease> = Api::namespaced(client.clone(), status_namespace);
    if let Ok(list) = leases.list(&ListParams::default()).await {
        for lease in list.items {
            let name = lease.metadata.name.unwrap_or_default();
            let labelled = lease
                .metadata
                .labels
                .is_some_and(|l| l.contains_key(crate::ha::shard::LABEL_GROUP));
            if labelled || name.starts_with("ruleop") {
                let holder = lease.spec.and_then(|s| s.holder_identity).unwrap_or_default();
                status.leases.insert(name, holder);
            }
        }
    }
    for rule in &set.rules {
        let watch = &rule.spec.watch;
        let mut summary = RuleStatus {
            name: rule.name.clone(),
            watches: format!("{} {}", watch.api_version, watch.kind),
            ..RuleStatus::default()
        };
        match crate::inspect::live::list_parents(client, kinds, rule, options.namespace.as_deref(), None).await {
            Ok(parents) => summarise(&mut summary, &parents),
            Err(e) => summary.error = Some(format!("{e:#}")),
        }
        status.rules.push(summary);
    }
    Ok(status)
}

/// A parent's `Ready` state (`True`, `False`, `Unknown`, or `None` while not set yet) and its
/// condition.
pub(crate) fn ready_condition(parent: &Value) -> (String, Option<&Value>) {
    let ready = parent
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready"));
    let state = ready
        .and_then(|c| c["status"].as_str())
        .map_or("None", |s| s)
        .to_owned();
    (state, ready)
}

/// Counts the parents by Ready and picks the failing and the behind ones.
fn summarise(summary: &mut RuleStatus, parents: &[Value]) {
    let text = |p: &Value, ptr: &str| p.pointer(ptr).and_then(Value::as_str).unwrap_or_default().to_owned();
    let mut failing = Vec::new();
    for parent in parents {
        let name = format!(
            "{}/{}",
            text(parent, "/metadata/namespace"),
            text(parent, "/metadata/name")
        );
        let (state, ready) = ready_condition(parent);
        *summary.ready.entry(state.clone()).or_default() += 1;
        if state != "True" {
            failing.push(Parent {
                name: name.clone(),
                since: ready.map(|c| text(c, "/lastTransitionTime")).unwrap_or_default(),
                reason: ready
                    .map(|c| text(c, "/reason"))
                    .unwrap_or_else(|| "NotReconciledYet".to_owned()),
                message: bounded(&ready.map(|c| text(c, "/message")).unwrap_or_default(), 200).into_owned(),
            });
        }
        let generation = parent
            .pointer("/metadata/generation")
            .and_then(Value::as_i64)
            .unwrap_or(0);
        let observed = parent.pointer("/status/observedGeneration").and_then(Value::as_i64);
        if observed.is_some_and(|o| o < generation) && summary.behind.len() < LISTED {
            summary.behind.push(Parent {
                name,
                since: format!("generation {generation}, observed {}", observed.unwrap_or(0)),
                ..Parent::default()
            });
        }
    }
    // RFC 3339 times in UTC sort as text; a parent never reconciled ("") comes first.
    failing.sort_by(|a, b| a.since.cmp(&b.since).then(a.name.cmp(&b.name)));
    failing.truncate(LISTED);
    summary.failing = failing;
}

/// The report as text, with every control character a tenant (or anyone who can write a Lease
/// or a parent's status) put into a name, reason or message written out as `\u{…}`, as `trace`
/// does: the text goes to a terminal.
pub(crate) fn text(status: &Status, status_namespace: &str) -> String {
    clean(&text_raw(status, status_namespace))
}

fn text_raw(status: &Status, status_namespace: &str) -> String {
    let field = |key: &str| status.reload.get(key).map_or("", String::as_str);
    let mut out = String::new();
    if status.reload.is_empty() {
        out.push_str(&format!(
            "reload: no {status_namespace}/{} ConfigMap (is ruleop running, with --status-namespace {status_namespace}?)\n",
            crate::records::status::STATUS_CONFIGMAP
        ));
    } else {
        out.push_str(&format!(
            "reload: {} at {} (rules in force: {}; fingerprint {})\n",
            field("state"),
            field("updatedAt"),
            field("rulesInForce"),
            &field("fingerprint")[..field("fingerprint").len().min(16)]
        ));
        for line in field("errors").lines().filter(|l| !l.is_empty()) {
            out.push_str(&format!("  {line}\n"));
        }
    }
    if status.leases.is_empty() {
        out.push_str("leases: none (a single replica without --leader-elect)\n");
    }
    for (name, holder) in &status.leases {
        let holder = if holder.is_empty() { "(not held)" } else { holder };
        out.push_str(&format!("lease {name}: {holder}\n"));
    }
    for rule in &status.rules {
        let counts: Vec<String> = rule
            .ready
            .iter()
            .map(|(state, n)| format!("{n} Ready={state}"))
            .collect();
        let counts = if counts.is_empty() {
            "no parents".to_owned()
        } else {
            counts.join(", ")
        };
        out.push_str(&format!("rule {} ({}): {counts}\n", rule.name, rule.watches));
        if let Some(error) = &rule.error {
            out.push_str(&format!("  error: {error}\n"));
        }
        for parent in &rule.failing {
            let since = if parent.since.is_empty() {
                String::new()
            } else {
                format!(" since {}", parent.since)
            };
            out.push_str(&format!(
                "  not ready: {}{since}: {}: {}\n",
                parent.name, parent.reason, parent.message
            ));
        }
        for parent in &rule.behind {
            out.push_str(&format!("  behind: {} ({})\n", parent.name, parent.since));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parent(name: &str, ready: Option<(&str, &str)>, generation: i64, observed: i64) -> Value {
        let conditions: Vec<Value> = ready
            .map(|(status, since)| {
                json!({"type": "Ready", "status": status, "reason": "R", "message": "m", "lastTransitionTime": since})
            })
            .into_iter()
            .collect();
        json!({"metadata": {"namespace": "shop", "name": name, "generation": generation},
               "status": {"observedGeneration": observed, "conditions": conditions}})
    }

    /// Issue 48, item 8: a Ready message with 4 ESC and 1 BEL (window title, clear screen, a fake
    /// line) reached the terminal raw; `trace` escaped them, `status` did not.
    #[test]
    fn a_tenants_escape_sequences_are_written_out_not_sent_to_the_terminal() {
        let mut summary = RuleStatus::default();
        let mut hostile = parent("evil", Some(("False", "2026-01-01T00:00:00Z")), 1, 1);
        hostile["status"]["conditions"][0]["message"] =
            json!("\u{1b}]0;pwned\u{7}\u{1b}[2J\u{1b}[H\u{1b}[32mrule db: 1 Ready=True");
        summarise(&mut summary, &[hostile]);
        let status = Status {
            reload: BTreeMap::from([("state".into(), "Loaded".into())]),
            leases: BTreeMap::from([("ruleop-leader".into(), "pod\u{1b}[31m".into())]),
            rules: vec![summary],
        };
        let shown = text(&status, "ruleop");
        assert!(!shown.chars().any(|c| c.is_control() && c != '\n'), "{shown:?}");
        assert!(shown.contains("\\u{1b}]0;pwned\\u{7}\\u{1b}[2J"), "{shown}");
        assert!(shown.contains("lease ruleop-leader: pod\\u{1b}[31m"), "{shown}");
    }

    #[test]
    fn parents_are_counted_by_ready_and_the_longest_failing_and_the_behind_ones_are_named() {
        let mut summary = RuleStatus::default();
        let parents = [
            parent("a", Some(("True", "2026-01-01T00:00:00Z")), 1, 1),
            parent("b", Some(("False", "2026-01-02T00:00:00Z")), 2, 2),
            parent("c", Some(("False", "2026-01-01T00:00:00Z")), 3, 2),
            parent("d", None, 1, 0),
        ];
        summarise(&mut summary, &parents);
        assert_eq!(
            summary.ready,
            BTreeMap::from([("False".into(), 2), ("None".into(), 1), ("True".into(), 1)])
        );
        let failing: Vec<&str> = summary.failing.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(failing, vec!["shop/d", "shop/c", "shop/b"]);
        assert_eq!(summary.failing[0].reason, "NotReconciledYet");
        let behind: Vec<&str> = summary.behind.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(behind, vec!["shop/c", "shop/d"]);
        let status = Status {
            reload: BTreeMap::from([("state".into(), "Loaded".into())]),
            rules: vec![summary],
            ..Status::default()
        };
        assert!(!healthy(&status));
        assert!(text(&status, "ruleop").contains(
            "rule  (): 2 Ready=False, 1 Ready=None, 1 Ready=True\n  not ready: shop/d: NotReconciledYet: \n"
        ));
    }
}
