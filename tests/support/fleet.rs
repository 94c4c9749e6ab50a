//! Several `ruleop run` replicas at once (leader election, sharding): who leads, what each
//! wrote, and what the parents and their backup Jobs look like.

use std::collections::BTreeMap;

use serde_json::Value;

use super::{Operator, kubectl_ok};

/// An unlabelled gauge from a `/metrics` text (`ruleop_leader{} 1` or `ruleop_leader 1`).
pub fn gauge(text: &str, name: &str) -> Option<i64> {
    text.lines().find_map(|line| {
        let rest = line.strip_prefix(name)?;
        let value = rest.strip_prefix("{}").unwrap_or(rest).strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

impl Operator {
    /// An unlabelled gauge of this replica; `None` if it does not answer.
    pub fn gauge(&self, name: &str) -> Option<i64> {
        gauge(&self.get("/metrics")?, name)
    }

    /// Whether this replica says it leads.
    pub fn leads(&self) -> bool {
        self.gauge("ruleop_leader") == Some(1)
    }

    /// Write requests this replica sent, by its own `ruleop_api_writes_total`, Events excluded.
    pub fn writes(&self) -> u64 {
        let text = self.get("/metrics").unwrap_or_default();
        super::sum_metric(&text, "ruleop_api_writes_total", &[])
            - super::sum_metric(&text, "ruleop_api_writes_total", &[("kind", "Event")])
    }

    /// Memory in use (VmRSS) in bytes, from /proc.
    pub fn rss(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .map_or(0, |kb| kb * 1024)
    }
}

/// Action Jobs in `ns` by (parent, action id), from their `app` and `ruleop.io/action` labels.
pub fn jobs_per_parent_and_action(ns: &str) -> BTreeMap<(String, String), usize> {
    let out = kubectl_ok(&[
        "get",
        "jobs",
        "-n",
        ns,
        "-l",
        "ruleop.io/action",
        "-o",
        "jsonpath={range .items[*]}{.metadata.labels.app} {.metadata.labels.ruleop\\.io/action}{\"\\n\"}{end}",
    ]);
    let mut counts = BTreeMap::new();
    for line in out.lines().filter(|l| !l.is_empty()) {
        let (app, action) = line.split_once(' ').unwrap_or((line, ""));
        *counts.entry((app.to_owned(), action.to_owned())).or_insert(0) += 1;
    }
    counts
}

/// Action Jobs in `ns` per parent, from their `app` label.
pub fn jobs_per_parent(ns: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for ((app, _), jobs) in jobs_per_parent_and_action(ns) {
        *counts.entry(app).or_insert(0) += jobs;
    }
    counts
}

/// Every Database in `ns` as JSON.
pub fn databases(ns: &str) -> Vec<Value> {
    let list: Value =
        serde_json::from_str(&kubectl_ok(&["get", "databases", "-n", ns, "-o", "json"])).unwrap_or_default();
    list["items"].as_array().cloned().unwrap_or_default()
}

/// Whether a Database has been reconciled at its generation and its backup for that
/// generation is done.
pub fn backed_up(db: &Value) -> bool {
    let generation = db["metadata"]["generation"].as_i64().unwrap_or(0);
    db["status"]["observedGeneration"].as_i64() == Some(generation)
        && db["status"]["actions"]["backup"]["guardValue"].as_str() == Some(&format!("generation={generation}"))
        && db["status"]["actions"]["backup"]["phase"].as_str() == Some("Done")
}
