//! What the API server served for an operator's writes: its write counters read at one moment,
//! and the writes since then that were ruleop's (tests/it/exclusive/writes.rs, `ruleop-bench writes`).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use super::audit::AuditMark;
use super::{Operator, kubectl_ok, wait_until};

/// How long the API server may take to serve the writes ruleop sent.
const WAIT: Duration = Duration::from_secs(60);

/// Events (events.k8s.io) not reported by ruleop, cluster-wide: the API server's own controllers
/// publish some (its ClusterIP repair loop about new Services), and its counter cannot tell.
fn foreign_events() -> BTreeSet<String> {
    kubectl_ok(&[
        "get",
        "events.v1.events.k8s.io",
        "-A",
        "-o",
        "jsonpath={range .items[*]}{.metadata.namespace}/{.metadata.name} {.reportingController}{\"\\n\"}{end}",
    ])
    .lines()
    .filter_map(|l| l.split_once(' '))
    .filter(|(_, controller)| *controller != "ruleop")
    .map(|(name, _)| name.to_owned())
    .collect()
}

/// Creates and updates of [`DATABASE_WRITES`] (Events aside: [`foreign_events`]) that neither
/// ruleop nor a test's kubectl sent since `mark`, keyed as [`apiserver_write_counts`] keys them:
/// the cluster's own controllers write these kinds too, anywhere in the shared control plane (the
/// protection controller takes its finalizer off every volume claim of a namespace another test
/// deleted, one update each).
fn foreign_writes(mark: &AuditMark) -> BTreeMap<String, u64> {
    let mut writes = BTreeMap::new();
    for write in mark.since() {
        let verb = match write.verb.as_str() {
            "create" => "POST",
            "update" => "PUT",
            _ => continue,
        };
        let (resource, subresource) = write.resource.split_once('/').unwrap_or((&write.resource, ""));
        if write.by_ruleop() || write.by_kubectl() || resource == "events" || !DATABASE_WRITES.contains(&resource) {
            continue;
        }
        let key = write_key(verb, resource, &write.group, subresource, &write.code.to_string());
        *writes.entry(key).or_insert(0) += 1;
    }
    writes
}

/// The API server's write counters, ruleop's own count of the writes it sent, the Events
/// others published, and the audit log's end, at one moment.
pub struct Reading {
    counts: BTreeMap<String, u64>,
    sent: u64,
    foreign: BTreeSet<String>,
    mark: AuditMark,
}

pub fn reading(operator: &Operator) -> Reading {
    Reading {
        counts: apiserver_write_counts(DATABASE_WRITES),
        sent: operator.metric("ruleop_api_writes_total", &[]),
        foreign: foreign_events(),
        mark: AuditMark::now(),
    }
}

/// Waits until the API server has served every write the operator sent (Events go out in the
/// background, after the reconcile that caused them) and the operator is idle, then returns the
/// API server's writes since `before`, without the test's own (`ours`, one each) and without
/// what others wrote meanwhile ([`foreign_events`], [`foreign_writes`]).
pub fn writes_since(operator: &Operator, before: &Reading, ours: &[&str]) -> BTreeMap<String, u64> {
    operator.idle_reconciles("database");
    let sent = operator.metric("ruleop_api_writes_total", &[]) - before.sent;
    let total = sent + ours.len() as u64;
    let served = || {
        let mut writes = count_difference(&before.counts, &apiserver_write_counts(DATABASE_WRITES));
        for (key, count) in foreign_writes(&before.mark) {
            take(&mut writes, &key, count);
        }
        writes
    };
    wait_until(WAIT, "the API server to serve every write ruleop sent", || {
        let served: u64 = served().values().sum();
        served.saturating_sub(foreign_events().difference(&before.foreign).count() as u64) >= total
    });
    let mut writes = served();
    let foreign = foreign_events().difference(&before.foreign).count();
    let theirs = std::iter::repeat_n("POST events.events.k8s.io", foreign);
    for write in ours.iter().copied().chain(theirs) {
        take(&mut writes, write, 1);
    }
    writes
}

/// Takes `count` off `writes[key]`, leaving out a key that reaches 0.
fn take(writes: &mut BTreeMap<String, u64>, key: &str, count: u64) {
    let left = writes.get(key).copied().unwrap_or(0).saturating_sub(count);
    if left == 0 {
        writes.remove(key);
    } else {
        writes.insert(key.to_owned(), left);
    }
}

/// Everything a reconcile of the shipped Database rule can write, for [`apiserver_write_counts`]:
/// its children (the backups volume among them), its backup Jobs, itself (finalizer, status) and
/// Events.
pub const DATABASE_WRITES: &[&str] = &[
    "services",
    "statefulsets",
    "persistentvolumeclaims",
    "jobs",
    "databases",
    "events",
];

/// A write's key in [`apiserver_write_counts`]: `"VERB resource[.group][/subresource]"`, with the
/// response code appended when it is not a success.
fn write_key(verb: &str, resource: &str, group: &str, subresource: &str, code: &str) -> String {
    let mut key = format!("{verb} {resource}");
    if !group.is_empty() {
        key = format!("{key}.{group}");
    }
    if !subresource.is_empty() {
        key = format!("{key}/{subresource}");
    }
    if !code.starts_with('2') {
        key = format!("{key} {code}");
    }
    key
}

/// Write requests (POST, PUT, PATCH, APPLY) the API server has served for `resources`, from its
/// own `apiserver_request_total`, by `"VERB resource[.group][/subresource]"` with the response
/// code appended when it is not a success (`"POST jobs.batch 409"`), dry runs left out. Two readings
/// subtracted with [`count_difference`] give one scenario's writes, verb by verb.
pub fn apiserver_write_counts(resources: &[&str]) -> std::collections::BTreeMap<String, u64> {
    let text = kubectl_ok(&["get", "--raw", "/metrics"]);
    let scrape = prometheus_parse::Scrape::parse(text.lines().map(|l| Ok(l.to_owned()))).expect("the scrape parses");
    let mut counts = std::collections::BTreeMap::new();
    for sample in scrape.samples.iter().filter(|s| s.metric == "apiserver_request_total") {
        let label = |name: &str| sample.labels.get(name).unwrap_or_default();
        let (verb, resource, code) = (label("verb"), label("resource"), label("code"));
        if !["POST", "PUT", "PATCH", "APPLY"].contains(&verb)
            || !resources.contains(&resource)
            || !label("dry_run").is_empty()
        {
            continue;
        }
        let key = write_key(verb, resource, label("group"), label("subresource"), code);
        let value = match sample.value {
            prometheus_parse::Value::Counter(v) | prometheus_parse::Value::Untyped(v) => v as u64,
            _ => 0,
        };
        *counts.entry(key).or_insert(0) += value;
    }
    counts
}

/// `after - before` of two [`apiserver_write_counts`] readings, without the entries that did not move.
pub fn count_difference(
    before: &std::collections::BTreeMap<String, u64>,
    after: &std::collections::BTreeMap<String, u64>,
) -> std::collections::BTreeMap<String, u64> {
    after
        .iter()
        .map(|(key, n)| (key.clone(), n - before.get(key).copied().unwrap_or(0)))
        .filter(|(_, n)| *n > 0)
        .collect()
}
