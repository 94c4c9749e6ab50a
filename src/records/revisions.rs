//! Keeps the last revisions of each rule in ConfigMaps of the status namespace, one per revision
//! (`ruleop-rev-<rule>-<n>`), read back when the operator starts, so revision numbers go on
//! across restarts and leaders, and an older revision's files stay at hand after the mounted
//! files moved on. What a revision is, and its record, are the engine's (`engine::rollout`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use tracing::{info, warn};

use crate::engine::rollout::record::{Record, RecordError};
use crate::engine::rollout::revision::Revision;
use crate::engine::rules::RuleSet;
use crate::engine::rules::load::{SourceFile, load_sources};

/// How many revisions of each rule are kept unless `--keep-revisions` says otherwise.
pub(crate) const DEFAULT_KEEP: usize = 10;

/// The label naming the rule a kept revision belongs to (not `ruleop.io/rule`, which marks
/// children).
const LABEL_RULE: &str = "ruleop.io/revision-of";
/// The label holding a kept revision's number.
const LABEL_REVISION: &str = "ruleop.io/revision";

/// The label selector of the kept revisions of `rule`, or of every rule.
pub(crate) fn selector(rule: Option<&str>) -> String {
    match rule {
        Some(rule) => format!("{LABEL_RULE}={rule}"),
        None => LABEL_RULE.to_owned(),
    }
}

/// The revision number a kept revision's ConfigMap labels carry.
pub(crate) fn number_of(config_map: &ConfigMap) -> Option<u64> {
    config_map.metadata.labels.as_ref()?.get(LABEL_REVISION)?.parse().ok()
}

/// The newest kept revision of `rule` before `revision`, by the kept ConfigMaps' labels.
pub(crate) async fn kept_before(api: &Api<ConfigMap>, rule: &str, revision: u64) -> Result<Option<u64>, kube::Error> {
    let listed = api.list(&ListParams::default().labels(&selector(Some(rule)))).await?;
    Ok(listed.iter().filter_map(number_of).filter(|n| *n < revision).max())
}

/// The revisions recorded in force: each rule's number, and one line per rule for
/// `ruleop-status` (`database: 3`, or why its revision is not kept).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct InForce {
    /// Rule -> the number of its revision in force.
    pub(crate) numbers: BTreeMap<String, u64>,
    /// The `revisions` key of `ruleop-status`.
    pub(crate) lines: String,
}

/// `set` with each rule stamped with its revision number among `numbers` (a rule not named
/// keeps what it had): built anew, so a set in force is never changed in place.
pub(crate) fn stamped(set: RuleSet, numbers: &BTreeMap<String, u64>) -> RuleSet {
    let rules = set
        .rules
        .into_iter()
        .map(|rule| match numbers.get(&rule.name) {
            Some(&number) => crate::engine::rules::Rule {
                revision: Some(number),
                ..rule
            },
            None => rule,
        })
        .collect();
    RuleSet { rules, ..set }
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
    let loaded = load_sources(&files("templates/"), &files("rules/")).map_err(|d| d.to_string())?;
    let alone = RuleSet {
        rules: loaded.rules.into_iter().filter(|r| r.name == record.rule).collect(),
        ..loaded
    };
    Ok(stamped(
        alone,
        &BTreeMap::from([(record.rule.clone(), record.revision.number)]),
    ))
}

/// The kept revisions of every rule, as far as this process knows them.
pub(crate) struct RevisionStore {
    api: Api<ConfigMap>,
    keep: usize,
    /// Rule -> number -> revision; `None` until read back from the cluster.
    known: Option<BTreeMap<String, BTreeMap<u64, Revision>>>,
}

/// The kept record of revision `number` of `rule`, with its files, from the ConfigMaps `api`.
pub(crate) async fn read_record(api: &Api<ConfigMap>, rule: &str, number: u64) -> Result<Record, String> {
    let config_map = api
        .get(&config_map_name(rule, number))
        .await
        .map_err(|e| e.to_string())?;
    let record = Record::from_data(&config_map.data.unwrap_or_default()).map_err(|e| e.to_string())?;
    if record.rule != rule || record.revision.number != number {
        return Err(format!(
            "it holds revision {} of rule {:?}",
            record.revision.number, record.rule
        ));
    }
    Ok(record)
}

/// The ConfigMap name of a rule's revision.
pub(crate) fn config_map_name(rule: &str, number: u64) -> String {
    format!("ruleop-rev-{rule}-{number}")
}

impl RevisionStore {
    /// A store in `namespace` keeping `keep` revisions of each rule (at least one).
    pub(crate) fn new(client: Client, namespace: &str, keep: usize) -> Self {
        RevisionStore {
            api: Api::namespaced(client, namespace),
            keep: keep.max(1),
            known: None,
        }
    }

    /// The number of `rule`'s latest revision (0 while none is known).
    pub(crate) fn latest(&self, rule: &str) -> u64 {
        self.known
            .as_ref()
            .and_then(|known| known.get(rule))
            .and_then(|kept| kept.last_key_value())
            .map_or(0, |(number, _)| *number)
    }

    /// Records the revision in force of every rule of `set`: a rule whose files differ from its
    /// latest revision gets the next one, kept in a new ConfigMap, and revisions beyond the last
    /// `keep` are deleted. Returns each rule's number (the set is stamped with them by
    /// [`stamped`]) and, for `ruleop-status`, one line per rule: `database: 3`, or why its
    /// revision is not kept. Failures are reported there and logged; the rules keep running.
    pub(crate) async fn record(&mut self, set: &RuleSet) -> InForce {
        let mut in_force = InForce::default();
        if self.known.is_none() {
            match self.read_back().await {
                Ok(known) => self.known = Some(known),
                Err(e) => {
                    warn!(error = %e, "cannot read the kept revisions back; revisions are not recorded");
                    in_force.lines = format!("revisions are not kept: cannot list them: {e}");
                    return in_force;
                }
            }
        }
        let mut lines = Vec::new();
        for rule in &set.rules {
            let now = jiff::Timestamp::now();
            let latest = self
                .known
                .as_ref()
                .and_then(|known| known.get(&rule.name))
                .and_then(|kept| kept.last_key_value())
                .map(|(_, revision)| revision.clone());
            let revision = match &latest {
                None => Revision::first(&rule.files, now),
                Some(latest) => match latest.next(&rule.files, now) {
                    None => {
                        in_force.numbers.insert(rule.name.clone(), latest.number);
                        lines.push(format!("{}: {}", rule.name, latest.number));
                        continue;
                    }
                    Some(next) => next,
                },
            };
            let record = Record {
                rule: rule.name.clone(),
                revision: revision.clone(),
                contents: rule.files.clone(),
            };
            let line = match self.keep_record(&record).await {
                Ok(()) => format!("{}: {}", rule.name, revision.number),
                Err(e) => {
                    warn!(rule = %rule.name, error = %e, "a revision is in force but not kept");
                    format!("{}: {} (not kept: {e})", rule.name, revision.number)
                }
            };
            in_force.numbers.insert(rule.name.clone(), revision.number);
            // Known even when not kept, so the next revision gets the next number.
            if let Some(known) = self.known.as_mut() {
                known
                    .entry(rule.name.clone())
                    .or_default()
                    .insert(revision.number, revision);
            }
            lines.push(line);
            self.prune(&rule.name).await;
        }
        in_force.lines = lines.join("\n");
        in_force
    }

    /// The ConfigMaps of the status namespace, where the revisions are kept.
    pub(crate) fn config_maps(&self) -> &Api<ConfigMap> {
        &self.api
    }

    /// The revision numbers of each rule whose records this process knows to be kept.
    pub(crate) fn kept(&self) -> BTreeMap<String, BTreeSet<u64>> {
        self.known
            .iter()
            .flatten()
            .map(|(rule, kept)| (rule.clone(), kept.keys().copied().collect()))
            .collect()
    }

    /// Every readable revision record in the namespace, by rule and number. A record that does
    /// not read back (edited, cut short) is logged and left out.
    async fn read_back(&self) -> Result<BTreeMap<String, BTreeMap<u64, Revision>>, kube::Error> {
        let listed = self
            .api
            .list(&ListParams::default().labels(&format!("{LABEL_RULE},{LABEL_REVISION}")))
            .await?;
        let mut known: BTreeMap<String, BTreeMap<u64, Revision>> = BTreeMap::new();
        for config_map in listed {
            let name = config_map.metadata.name.clone().unwrap_or_default();
            match Record::from_data(&config_map.data.unwrap_or_default()) {
                Ok(record) => {
                    known
                        .entry(record.rule)
                        .or_default()
                        .insert(record.revision.number, record.revision);
                }
                Err(e) => warn!(config_map = %name, error = %e, "a kept revision does not read back; ignored"),
            }
        }
        Ok(known)
    }

    /// Creates the record's ConfigMap. One that exists already with the same files (another
    /// replica kept it first) counts as kept.
    async fn keep_record(&self, record: &Record) -> Result<(), String> {
        let data = record.to_data().map_err(|e| e.to_string())?;
        let name = config_map_name(&record.rule, record.revision.number);
        let config_map: ConfigMap = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {
                "name": name,
                "labels": {
                    "app.kubernetes.io/managed-by": "ruleop",
                    LABEL_RULE: record.rule,
                    LABEL_REVISION: record.revision.number.to_string(),
                },
            },
            "data": data,
        }))
        .map_err(|e| e.to_string())?;
        match self.api.create(&PostParams::default(), &config_map).await {
            Ok(_) => {
                info!(rule = %record.rule, revision = record.revision.number, changed = ?record.revision.changed, "revision kept");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                let existing = self.api.get(&name).await.map_err(|e| e.to_string())?;
                match Record::from_data(&existing.data.unwrap_or_default()) {
                    Ok(kept) if kept.revision.digest == record.revision.digest => Ok(()),
                    Ok(_) => Err(format!("{name} exists with other files")),
                    Err(RecordError::Invalid(why)) => Err(format!("{name} exists and is not a revision: {why}")),
                    Err(e) => Err(e.to_string()),
                }
            }
            Err(e) => Err(e.to_string()),
        }
    }

    /// Deletes a rule's revisions beyond the last `keep`.
    async fn prune(&mut self, rule: &str) {
        let Some(kept) = self.known.as_mut().and_then(|known| known.get_mut(rule)) else {
            return;
        };
        while kept.len() > self.keep {
            let Some((number, _)) = kept.pop_first() else {
                break;
            };
            let name = config_map_name(rule, number);
            match self.api.delete(&name, &DeleteParams::default()).await {
                Ok(_) => info!(rule, revision = number, "revision no longer kept"),
                Err(kube::Error::Api(status)) if status.code == 404 => {}
                Err(e) => warn!(rule, revision = number, error = %e, "deleting an old revision failed"),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn two_rules() -> RuleSet {
        crate::engine::rules::load::load_sources(
            &[],
            &[(
                "rules.yaml".to_owned(),
                PathBuf::from("rules/rules.yaml"),
                "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {name: a}\nspec:\n  watch: {apiVersion: example.com/v1, kind: A}\n---\napiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {name: b}\nspec:\n  watch: {apiVersion: example.com/v1, kind: B}\n".to_owned(),
            )],
        )
        .expect("loads")
    }

    #[test]
    fn a_revision_is_named_by_its_rule_and_number_and_selected_by_its_rule() {
        assert_eq!(config_map_name("db", 3), "ruleop-rev-db-3");
        assert_eq!(selector(Some("db")), "ruleop.io/revision-of=db");
        assert_eq!(selector(None), "ruleop.io/revision-of");
        let labelled: ConfigMap = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "ruleop-rev-db-3", "labels": {LABEL_RULE: "db", LABEL_REVISION: "3"}},
        }))
        .expect("a ConfigMap");
        assert_eq!(number_of(&labelled), Some(3));
        assert_eq!(number_of(&ConfigMap::default()), None);
    }

    #[test]
    fn stamping_names_only_the_rules_it_is_given() {
        let set = stamped(two_rules(), &BTreeMap::from([("a".to_owned(), 4)]));
        let numbers: Vec<Option<u64>> = set.rules.iter().map(|r| r.revision).collect();
        assert_eq!(numbers, [Some(4), None]);
    }

    #[test]
    fn a_kept_record_loads_as_its_rule_alone_stamped_with_its_number() {
        let set = two_rules();
        let rule = set.rule("b").expect("b");
        let record = Record {
            rule: "b".to_owned(),
            revision: Revision::first(&rule.files, jiff::Timestamp::now()),
            contents: rule.files.clone(),
        };
        let kept = set_of_record(&record).expect("loads");
        let names: Vec<(&str, Option<u64>)> = kept.rules.iter().map(|r| (r.name.as_str(), r.revision)).collect();
        assert_eq!(names, [("b", Some(1))]);
    }
}
