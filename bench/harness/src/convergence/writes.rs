//! API writes as the API server counts them (`apiserver_request_total`), and Prometheus text.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use kube::Client;
use kube::api::ListParams;

/// Write verbs counted (server-side apply is reported as APPLY).
const WRITE_VERBS: [&str; 5] = ["POST", "PUT", "PATCH", "APPLY", "DELETE"];
/// Resources whose writes are counted: the parents (every contender's kind is `databases`), the
/// children (the shipped rule's backups volume among them), Events, and kro's own kinds.
const RESOURCES: [&str; 8] = [
    "services",
    "statefulsets",
    "persistentvolumeclaims",
    "jobs",
    "databases",
    "events",
    "resourcegraphdefinitions",
    "graphrevisions",
];

/// Requests by (verb, resource[/subresource][ [code]]).
pub type Counts = BTreeMap<(String, String), u64>;

use ruleop_testkit::metrics::labels;
pub use ruleop_testkit::metrics::sum_metric;

/// Write requests served by the API server so far.
pub async fn apiserver_writes(client: &Client) -> Result<Counts> {
    let request = kube::core::Request::new("/metrics").list(&ListParams::default())?;
    let text = client.request_text(request).await.context("GET /metrics")?;
    let mut counts = Counts::new();
    for line in text.lines().filter(|l| l.starts_with("apiserver_request_total{")) {
        let (labels, value) = labels(line);
        let (Some(verb), Some(resource), Some(value)) = (labels.get("verb"), labels.get("resource"), value) else {
            continue;
        };
        if !WRITE_VERBS.contains(verb) || !RESOURCES.contains(resource) {
            continue;
        }
        let mut resource = match labels.get("subresource").filter(|s| !s.is_empty()) {
            Some(sub) => format!("{resource}/{sub}"),
            None => (*resource).to_owned(),
        };
        // Failed requests (409 AlreadyExists, conflicts) count too; show them apart.
        if let Some(code) = labels.get("code").filter(|c| !c.starts_with('2')) {
            resource = format!("{resource} [{code}]");
        }
        *counts.entry(((*verb).to_owned(), resource)).or_default() += value as u64;
    }
    Ok(counts)
}

/// Waits until the write counters have not moved for `quiet` (at most `cap`); returns them.
pub async fn settle(client: &Client, quiet: Duration, cap: Duration) -> Result<Counts> {
    let start = Instant::now();
    let mut last = apiserver_writes(client).await?;
    let mut since = Instant::now();
    loop {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = apiserver_writes(client).await?;
        if now != last {
            last = now;
            since = Instant::now();
        } else if since.elapsed() >= quiet || start.elapsed() >= cap {
            return Ok(last);
        }
    }
}

/// `after - before`, without the zero entries.
pub fn diff(after: &Counts, before: &Counts) -> Counts {
    after
        .iter()
        .map(|(k, v)| (k.clone(), v.saturating_sub(before.get(k).copied().unwrap_or(0))))
        .filter(|(_, v)| *v > 0)
        .collect()
}

/// All writes.
pub fn total(counts: &Counts) -> u64 {
    counts.values().sum()
}

/// Writes the API server refused with 409 Conflict/AlreadyExists.
pub fn conflicts(counts: &Counts) -> u64 {
    counts
        .iter()
        .filter(|((_, resource), _)| resource.ends_with("[409]"))
        .map(|(_, v)| v)
        .sum()
}

/// "8001 (APPLY services 1000, ...)".
pub fn counts_text(counts: &Counts) -> String {
    if counts.is_empty() {
        return "0".to_owned();
    }
    let parts: Vec<String> = counts
        .iter()
        .map(|((verb, res), v)| format!("{verb} {res} {v}"))
        .collect();
    format!("{} ({})", total(counts), parts.join(", "))
}
