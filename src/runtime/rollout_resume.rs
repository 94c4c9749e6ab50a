//! Resumes, when the operator starts, the staged rollouts a previous process (or leader)
//! recorded in `ruleop-status`: the previous revision's rule set is loaded from its kept record,
//! so the parents the recorded step has not moved stay on it, and the step's pause goes on from
//! when it began. Runs before any controller starts, so no parent is reconciled under the wrong
//! revision in between. With `--shards`, the replicas that do not run the rollouts' clock
//! (`Writers::runs_rollouts`) follow, the same way, every state the one that does records.

use std::path::PathBuf;
use std::sync::Arc;

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::Api;
use kube::runtime::watcher;
use tracing::{info, warn};

use crate::cache::discovery::Kinds;
use crate::engine::rollout::record::Record;
use crate::engine::rollout::select::Phase;
use crate::engine::rules::RuleSet;
use crate::engine::rules::load::{SourceFile, load_sources};
use crate::engine::rules::rollout_policy::Rollout;
use crate::runtime::config_map_feed::ConfigMapFeed;
use crate::runtime::revisions::RevisionStore;
use crate::runtime::rollout::{ParentNow, Recorded, Rollouts, Staging, record_of, recorded};
use crate::runtime::rollout_report::RolloutReport;
use crate::runtime::run::STATUS_CONFIGMAP;

/// Resumes every recorded rollout of a rule of `set` whose new revision is the one in force.
pub(crate) async fn resume(
    rollouts: &Rollouts,
    set: &RuleSet,
    kinds: &Kinds,
    revisions: &RevisionStore,
    report: &mut RolloutReport,
) {
    for (name, text) in report.read_back().await {
        if let Some(read) = recorded(&text) {
            resume_rule(rollouts, set, kinds, revisions, &name, read).await;
        }
    }
}

/// Follows the recorded state `text` of `rule`'s rollout: the same rollout here takes its step
/// and phase (a complete one ends); one under way that this replica has not staged (started by
/// a request, or before this replica loaded the files) is resumed from its kept revision; a
/// record of another rollout (one of files this replica has not loaded yet, or has moved past)
/// is left alone. Returns whether `rule`'s parents may now be on other revisions.
pub(crate) async fn follow(
    rollouts: &Rollouts,
    (set, kinds): (&RuleSet, &Kinds),
    revisions: &RevisionStore,
    (rule, text): (&str, &str),
    parents: impl FnOnce() -> Vec<ParentNow>,
) -> bool {
    let Some(read) = record_of(text) else {
        return false;
    };
    let (from, to) = (read.state.from, read.state.to);
    match rollouts.get(rule) {
        Some(staging) if staging.is_between(from, to) => {
            if read.state.phase == Phase::Complete {
                rollouts.end(rule);
                info!(rule, "staged rollout complete, as recorded");
                return true;
            }
            let changed = staging.follow(&read, parents);
            if changed {
                info!(rule, state = %staging.describe(), "staged rollout: following the recorded state");
            }
            changed
        }
        Some(_) => false,
        None if read.state.phase == Phase::Complete => false,
        None => resume_rule(rollouts, set, kinds, revisions, rule, read).await,
    }
}

/// Resumes the recorded rollout `read` of `name` when its new revision is the one in force here
/// (its previous one loaded from the kept revisions). Returns whether it did.
async fn resume_rule(
    rollouts: &Rollouts,
    set: &RuleSet,
    kinds: &Kinds,
    revisions: &RevisionStore,
    name: &str,
    read: Recorded,
) -> bool {
    let Some(rule) = set.rule(name) else {
        return false;
    };
    // An undone rule without `spec.rollout` stays undone too.
    let policy = rule.rollout.clone().unwrap_or_else(Rollout::all_at_once);
    if read.state.to != revisions.latest(name) {
        // The files moved on while no operator ran: they came into force unstaged.
        return false;
    }
    let from = read.state.from;
    match previous_set(revisions.config_maps(), name, from, kinds).await {
        Ok(previous) => {
            let staging = Staging::resumed(Arc::new(previous), policy, read);
            info!(rule = %name, state = %staging.describe(), "staged rollout resumed");
            rollouts.start(name, staging);
            true
        }
        Err(e) => {
            warn!(
                rule = %name,
                revision = from,
                error = %e,
                "cannot resume the staged rollout: the previous revision does not load; every parent is on the revision in force"
            );
            false
        }
    }
}

/// The recorded rollouts' states (`rollout.<rule>` of `ruleop-status`), each time the ConfigMap
/// changes; the watch ends when dropped.
pub(crate) struct Records(ConfigMapFeed<BTreeMap<String, String>>);

impl Records {
    /// Watches `ruleop-status` in `namespace`.
    pub(crate) fn watch(client: Client, namespace: &str) -> Self {
        let config = watcher::Config::default().fields(&format!("metadata.name={STATUS_CONFIGMAP}"));
        Records(ConfigMapFeed::start(
            Api::namespaced(client, namespace),
            config,
            "the recorded rollouts",
            |status| rollout_states(status.data.unwrap_or_default()),
        ))
    }

    /// The recorded states after the next change.
    pub(crate) async fn next(&mut self) -> Option<BTreeMap<String, String>> {
        self.0.next().await
    }
}

/// The rollouts' states among `ruleop-status`'s keys: rule -> text.
pub(crate) fn rollout_states(data: BTreeMap<String, String>) -> BTreeMap<String, String> {
    data.into_iter()
        .filter_map(|(key, text)| key.strip_prefix("rollout.").map(|rule| (rule.to_owned(), text)))
        .collect()
}

/// The rule set of a kept revision (from the ConfigMaps `kept`): its rule file and templates,
/// loaded as at the time, stamped with its number, its kinds' scopes from discovery.
pub(crate) async fn previous_set(
    kept: &Api<ConfigMap>,
    rule: &str,
    number: u64,
    kinds: &Kinds,
) -> Result<RuleSet, String> {
    let record = crate::runtime::revisions::read_record(kept, rule, number).await?;
    let mut set = set_of_record(&record)?;
    crate::runtime::run::check_scopes(&mut set, kinds).map_err(|e| e.to_string())?;
    Ok(set)
}

/// The rule set a kept record's files load as: its rule alone (a rule file may hold others, whose
/// templates the record does not keep), stamped with the revision's number.
pub(crate) fn set_of_record(record: &Record) -> Result<RuleSet, String> {
    let files = |prefix: &str| -> Vec<SourceFile> {
        record
            .contents
            .iter()
            .filter_map(|(name, text)| {
                let relative = name.strip_prefix(prefix)?;
                Some((relative.to_owned(), PathBuf::from(name), text.clone()))
            })
            .collect()
    };
    let mut set = load_sources(&files("templates/"), &files("rules/")).map_err(|d| d.to_string())?;
    set.rules.retain(|r| r.name == record.rule);
    for kept in &mut set.rules {
        kept.revision = Some(record.revision.number);
    }
    Ok(set)
}
