//! What the soak checks, read from the API server: each parent's state, the backup Jobs, and
//! from them duplicates, missing backups, lost and unconverged parents.

use std::collections::{BTreeMap, BTreeSet};

use ruleop::engine::plan::actions::idempotency_key;
use serde_json::Value;

use ruleop_testkit::fleet::action_job_lines;
use ruleop_testkit::kubectl;

/// The annotation whose every new value asks for one backup (rules/database.yaml's
/// `backup-request` action).
pub const BACKUP_REQUEST: &str = "myorg.io/backup-request";

/// One Database as the checks need it.
#[derive(Clone, Debug)]
pub struct Parent {
    pub name: String,
    pub uid: String,
    pub generation: i64,
    observed: Option<i64>,
    backup: (String, String),
    request: (String, String),
    pub annotation: Option<String>,
}

impl Parent {
    fn from_json(db: &Value) -> Option<Self> {
        let action = |id: &str| {
            let record = &db["status"]["actions"][id];
            (
                record["guardValue"].as_str().unwrap_or_default().to_owned(),
                record["phase"].as_str().unwrap_or_default().to_owned(),
            )
        };
        Some(Parent {
            name: db["metadata"]["name"].as_str()?.to_owned(),
            uid: db["metadata"]["uid"].as_str()?.to_owned(),
            generation: db["metadata"]["generation"].as_i64()?,
            observed: db["status"]["observedGeneration"].as_i64(),
            backup: action("backup"),
            request: action("backup-request"),
            annotation: db["metadata"]["annotations"][BACKUP_REQUEST]
                .as_str()
                .filter(|v| !v.is_empty())
                .map(str::to_owned),
        })
    }

    /// Reconciled at its generation, with the backup of that generation and of its latest backup
    /// request (if any) done.
    pub fn converged(&self) -> bool {
        let done = |(guard, phase): &(String, String), want: String| *guard == want && phase == "Done";
        self.observed == Some(self.generation)
            && done(&self.backup, format!("generation={}", self.generation))
            && self
                .annotation
                .as_ref()
                .is_none_or(|value| done(&self.request, format!("annotation={value}")))
    }
}

/// Every Database of `ns`; `None` when the API server does not answer (it may be restarting).
pub fn parents(ns: &str) -> Option<Vec<Parent>> {
    let out = kubectl(&["get", "databases", "-n", ns, "-o", "json", "--request-timeout=20s"]);
    if !out.status.success() {
        return None;
    }
    let list: Value = serde_json::from_slice(&out.stdout).ok()?;
    Some(list["items"].as_array()?.iter().filter_map(Parent::from_json).collect())
}

/// One action Job: its parent (label `app`), action and idempotency key.
#[derive(Clone, Debug)]
pub struct Job {
    pub name: String,
    pub parent: String,
    pub action: String,
    pub key: String,
}

/// Every action Job of `ns`; `None` when the API server does not answer.
pub fn jobs(ns: &str) -> Option<Vec<Job>> {
    let fields = "{.metadata.name} {.metadata.labels.app} {.metadata.labels.ruleop\\.io/action} \
                  {.metadata.annotations.ruleop\\.io/idempotency-key}";
    Some(
        action_job_lines(ns, fields)?
            .lines()
            .filter_map(|line| {
                let mut fields = line.split(' ');
                Some(Job {
                    name: fields.next()?.to_owned(),
                    parent: fields.next()?.to_owned(),
                    action: fields.next()?.to_owned(),
                    key: fields.next().unwrap_or_default().to_owned(),
                })
            })
            .collect(),
    )
}

/// What the harness asked of each parent: the UID it was created with and every backup request
/// value it set. Generations need no record: every generation up to the current one is a spec
/// the harness wrote.
#[derive(Default)]
pub struct Ledger {
    pub uids: BTreeMap<String, String>,
    pub requests: BTreeMap<String, Vec<String>>,
}

/// The verdict of one look at the parents and Jobs.
#[derive(Clone, Debug, Default)]
pub struct Verdict {
    /// Parents seen, and those converged.
    pub parents: usize,
    pub converged: usize,
    /// The parents not converged.
    pub unconverged: Vec<String>,
    /// Jobs beyond the first for one (parent, action, guard value).
    pub duplicates: usize,
    /// Jobs whose key is no (parent, generation) or (parent, request value) the harness caused.
    pub unexpected: Vec<String>,
    /// Parents whose current generation or latest backup request has no Job.
    pub missing: Vec<String>,
    /// Generations and request values superseded before any replica saw them (no Job, by
    /// design: the guard runs for the value in force).
    pub coalesced: usize,
    /// Parents created that are gone, or came back with another UID.
    pub lost: Vec<String>,
}

/// Checks `parents` and `jobs` against the `ledger`.
pub fn verdict(ledger: &Ledger, parents: &[Parent], jobs: &[Job]) -> Verdict {
    let by_name: BTreeMap<&str, &Parent> = parents.iter().map(|p| (p.name.as_str(), p)).collect();
    let lost = ledger
        .uids
        .iter()
        .filter(|(name, uid)| by_name.get(name.as_str()).is_none_or(|p| p.uid != **uid))
        .map(|(name, _)| name.clone())
        .collect();
    // Every key the harness caused, to its (parent, action, guard value).
    let mut caused: BTreeMap<String, (String, &str, String)> = BTreeMap::new();
    for p in parents {
        for g in 1..=p.generation {
            let guard = format!("generation={g}");
            caused.insert(
                idempotency_key(&p.uid, "backup", &guard),
                (p.name.clone(), "backup", guard),
            );
        }
        let asked = ledger.requests.get(&p.name).into_iter().flatten();
        for value in asked.chain(p.annotation.iter()) {
            let guard = format!("annotation={value}");
            caused.insert(
                idempotency_key(&p.uid, "backup-request", &guard),
                (p.name.clone(), "backup-request", guard),
            );
        }
    }
    let mut per_guard: BTreeMap<&(String, &str, String), usize> = BTreeMap::new();
    let mut unexpected = Vec::new();
    for job in jobs {
        match caused.get(&job.key) {
            Some(guard) if guard.0 == job.parent && guard.1 == job.action => *per_guard.entry(guard).or_default() += 1,
            _ => unexpected.push(job.name.clone()),
        }
    }
    let duplicates = per_guard.values().map(|n| n.saturating_sub(1)).sum();
    let ran: BTreeSet<(&str, &str, &str)> = per_guard
        .keys()
        .map(|(parent, action, guard)| (parent.as_str(), *action, guard.as_str()))
        .collect();
    let mut missing = Vec::new();
    for p in parents {
        let current = format!("generation={}", p.generation);
        let request = p.annotation.as_ref().map(|v| format!("annotation={v}"));
        if !ran.contains(&(p.name.as_str(), "backup", current.as_str()))
            || request
                .as_deref()
                .is_some_and(|guard| !ran.contains(&(p.name.as_str(), "backup-request", guard)))
        {
            missing.push(p.name.clone());
        }
    }
    let current: BTreeSet<(String, String)> = parents
        .iter()
        .flat_map(|p| {
            let request = p
                .annotation
                .as_ref()
                .map(|v| (p.name.clone(), format!("annotation={v}")));
            std::iter::once((p.name.clone(), format!("generation={}", p.generation))).chain(request)
        })
        .collect();
    let coalesced = caused
        .values()
        .filter(|guard| !per_guard.contains_key(guard) && !current.contains(&(guard.0.clone(), guard.2.clone())))
        .count();
    Verdict {
        parents: parents.len(),
        converged: parents.iter().filter(|p| p.converged()).count(),
        unconverged: parents
            .iter()
            .filter(|p| !p.converged())
            .map(|p| p.name.clone())
            .collect(),
        duplicates,
        unexpected,
        missing,
        coalesced,
        lost,
    }
}
