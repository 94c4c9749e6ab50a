//! Resumes, when the operator starts, the staged rollouts a previous process (or leader)
//! recorded in `ruleop-status`: the previous revision's rule set is loaded from its kept record,
//! so the parents the recorded step has not moved stay on it, and the step's pause goes on from
//! when it began. Runs before any controller starts, so no parent is reconciled under the wrong
//! revision in between.

use std::path::PathBuf;
use std::sync::Arc;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use tracing::{info, warn};

use crate::cache::discovery::Kinds;
use crate::engine::rollout::policy::Rollout;
use crate::engine::rollout::record::Record;
use crate::engine::rules::RuleSet;
use crate::engine::rules::load::{SourceFile, load_sources};
use crate::runtime::revisions::RevisionStore;
use crate::runtime::rollout::{Rollouts, Staging, recorded};
use crate::runtime::rollout_report::RolloutReport;

/// Resumes every recorded rollout of a rule of `set` whose new revision is the one in force.
pub(crate) async fn resume(
    rollouts: &Rollouts,
    set: &RuleSet,
    kinds: &Kinds,
    revisions: &RevisionStore,
    report: &mut RolloutReport,
) {
    for (name, text) in report.read_back().await {
        let (Some(rule), Some(read)) = (set.rule(&name), recorded(&text)) else {
            continue;
        };
        // An undone rule without `spec.rollout` stays undone too.
        let policy = rule.rollout.clone().unwrap_or_else(Rollout::all_at_once);
        if read.state.to != revisions.latest(&name) {
            // The files moved on while no operator ran: they came into force unstaged.
            continue;
        }
        let from = read.state.from;
        match previous_set(revisions.config_maps(), &name, from, kinds).await {
            Ok(previous) => {
                let staging = Staging::resumed(Arc::new(previous), policy, read);
                info!(rule = %name, state = %staging.describe(), "staged rollout resumed");
                rollouts.start(&name, staging);
            }
            Err(e) => warn!(
                rule = %name,
                revision = from,
                error = %e,
                "cannot resume the staged rollout: the previous revision does not load; every parent is on the revision in force"
            ),
        }
    }
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
