//! `ruleop rollout status|history [RULE]`: staged rollouts and kept revisions as the cluster
//! holds them, read-only: the `rollout.<rule>` and `revisions` keys of `ruleop-status`, and the
//! revision ConfigMaps with a unified diff of each revision's changed files against the one before.

use std::collections::BTreeMap;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::cmd::live::dry_run::unified;
use crate::engine::rollout::record::Record;
use crate::runtime::run::STATUS_CONFIGMAP;

/// What to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Show {
    /// Each rule's revision in force and its rollout's state.
    Status,
    /// Each rule's kept revisions with the diffs of their files.
    History,
}

/// `ruleop rollout status|history`; returns the exit code: 0, or 1 when `status` finds a halted
/// or rolled-back rollout, 2 on error.
pub(crate) fn command(show: Show, rule: Option<&str>, status_namespace: &str) -> u8 {
    let Some(runtime) = crate::cmd::live::runtime() else {
        return 2;
    };
    let result = runtime.block_on(async {
        let config = crate::apply::client::cluster_config()
            .await
            .context("cannot connect to the cluster (kubeconfig or in-cluster config)")?;
        let client = Client::try_from(config).context("cannot build a client for the cluster")?;
        let config_maps: Api<ConfigMap> = Api::namespaced(client, status_namespace);
        match show {
            Show::Status => status(&config_maps, rule, status_namespace).await,
            Show::History => history(&config_maps, rule).await.map(|text| (text, 0)),
        }
    });
    match result {
        Ok((text, code)) => {
            print!("{text}");
            code
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    }
}

async fn status(config_maps: &Api<ConfigMap>, rule: Option<&str>, namespace: &str) -> anyhow::Result<(String, u8)> {
    let data = config_maps
        .get_opt(STATUS_CONFIGMAP)
        .await
        .with_context(|| format!("reading {namespace}/{STATUS_CONFIGMAP}"))?
        .and_then(|cm| cm.data)
        .unwrap_or_default();
    let in_force: BTreeMap<&str, &str> = data
        .get("revisions")
        .map(|lines| lines.lines().filter_map(|l| l.split_once(": ")).collect())
        .unwrap_or_default();
    let mut text = String::new();
    let mut code = 0;
    let mut rules: Vec<&str> = in_force.keys().copied().collect();
    rules.extend(data.keys().filter_map(|k| k.strip_prefix("rollout.")));
    rules.sort_unstable();
    rules.dedup();
    for name in rules.into_iter().filter(|name| rule.is_none_or(|r| r == *name)) {
        text.push_str(&format!(
            "rule {name}: revision {}\n",
            in_force.get(name).copied().unwrap_or("unknown")
        ));
        match data.get(&format!("rollout.{name}")) {
            Some(state) => {
                if state.contains("phase: Halted") || state.contains("phase: RolledBack") {
                    code = 1;
                }
                for line in state.lines() {
                    text.push_str(&format!("  {line}\n"));
                }
            }
            None => text.push_str("  no staged rollout\n"),
        }
    }
    if text.is_empty() {
        text = format!("no rule revisions recorded in {namespace}/{STATUS_CONFIGMAP}\n");
    }
    Ok((text, code))
}

async fn history(config_maps: &Api<ConfigMap>, rule: Option<&str>) -> anyhow::Result<String> {
    let selector = match rule {
        Some(rule) => format!("ruleop.io/revision-of={rule}"),
        None => "ruleop.io/revision-of".to_owned(),
    };
    let listed = config_maps
        .list(&ListParams::default().labels(&selector))
        .await
        .context("listing the kept revisions")?;
    let mut records: BTreeMap<String, BTreeMap<u64, Record>> = BTreeMap::new();
    let mut text = String::new();
    for config_map in listed {
        let name = config_map.metadata.name.clone().unwrap_or_default();
        match Record::from_data(&config_map.data.unwrap_or_default()) {
            Ok(record) => {
                records
                    .entry(record.rule.clone())
                    .or_default()
                    .insert(record.revision.number, record);
            }
            Err(e) => text.push_str(&format!("{name}: {e}\n")),
        }
    }
    for (name, revisions) in &records {
        text.push_str(&format!("rule {name}\n"));
        let mut before: Option<&Record> = None;
        for (number, record) in revisions {
            text.push_str(&format!(
                "  revision {number}  {}  digest {}  changed: {}\n",
                record.revision.created,
                &record.revision.digest[..record.revision.digest.len().min(16)],
                record.revision.changed.join(", ")
            ));
            if let Some(before) = before {
                for file in &record.revision.changed {
                    let old = before.contents.get(file).map_or("", String::as_str);
                    let new = record.contents.get(file).map_or("", String::as_str);
                    let diff = unified(
                        old,
                        new,
                        &format!("{file} (revision {})", before.revision.number),
                        &format!("{file} (revision {number})"),
                    );
                    for line in diff.lines() {
                        text.push_str(&format!("    {line}\n"));
                    }
                }
            }
            before = Some(record);
        }
    }
    if records.is_empty() && text.is_empty() {
        text.push_str("no kept revisions\n");
    }
    Ok(text)
}
