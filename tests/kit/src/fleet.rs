//! Several `ruleop run` replicas at once (leader election, sharding): who leads, what each
//! wrote, and what the parents and their backup Jobs look like.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::Value;

use super::{Operator, database, kubectl_ok, templates};

/// Lease timing for tests, so a failover takes seconds: lease 4 s, renew 3 s, retry 0.5 s.
pub const LEASE: Duration = Duration::from_secs(4);
const SHORT_LEASES: [&str; 6] = [
    "--lease-duration",
    "4s",
    "--renew-deadline",
    "3s",
    "--retry-period",
    "500ms",
];

/// A replica with the shipped templates, its leases in `ns` with the short test timing
/// ([`LEASE`]), and `extra` flags (`--leader-elect`, `--shards 12`).
pub fn replica(rules: &Path, ns: &str, extra: &[&str]) -> Operator {
    Operator::start_with(rules, &templates(), ns, &replica_flags(ns, extra))
}

/// The flags of a [`replica`]: its leases in `ns` with the short test timing, then `extra`.
pub fn replica_flags<'a>(ns: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut flags = vec!["--lease-namespace", ns];
    flags.extend(SHORT_LEASES);
    flags.extend(extra);
    flags
}

/// `count` Databases `db-0`, `db-1`, ... with `replicas` and backups enabled, as one YAML stream.
pub fn databases_yaml(count: usize, replicas: u32) -> String {
    (0..count)
        .map(|i| database(&format!("db-{i}"), replicas, "  backup:\n    enabled: true\n"))
        .collect::<Vec<_>>()
        .join("\n---\n")
}

/// Whether every one of the `count` Databases `db-*` in `ns` is backed up at its generation.
pub fn all_backed_up(ns: &str, count: usize) -> bool {
    let dbs: Vec<_> = databases(ns)
        .into_iter()
        .filter(|db| db["metadata"]["name"].as_str().is_some_and(|n| n.starts_with("db-")))
        .collect();
    dbs.len() == count && dbs.iter().all(backed_up)
}

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

    /// How many shards this replica holds (`ruleop_shards_held`).
    pub fn shards_held(&self) -> Option<i64> {
        self.gauge("ruleop_shards_held")
    }

    /// The shards this replica holds, from `ruleop_shard_leader{shard}`.
    pub fn shards(&self) -> Vec<u32> {
        let text = self.get("/metrics").unwrap_or_default();
        shard_series(&text, "ruleop_shard_leader")
            .into_iter()
            .filter(|(_, v)| *v == 1)
            .map(|(shard, _)| shard)
            .collect()
    }

    /// Reconciles this replica ran per shard, from `ruleop_shard_reconciles_total{shard}`.
    pub fn shard_reconciles(&self) -> BTreeMap<u32, u64> {
        let text = self.get("/metrics").unwrap_or_default();
        shard_series(&text, "ruleop_shard_reconciles_total")
            .into_iter()
            .filter(|(_, v)| *v > 0)
            .collect()
    }

    /// CPU time (user + system) the process has used so far, from /proc/<pid>/stat.
    pub fn cpu(&self) -> Duration {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.pid())).unwrap_or_default();
        // Fields after the command name (which may hold spaces) start at the last ')'.
        let fields: Vec<&str> = stat
            .rsplit_once(')')
            .map_or("", |(_, rest)| rest)
            .split_whitespace()
            .collect();
        let ticks = |i: usize| fields.get(i).and_then(|v| v.parse::<u64>().ok()).unwrap_or(0);
        // utime and stime are fields 14 and 15 of the line, 11 and 12 (from 0) after the name; the
        // kernel counts them in USER_HZ, which is 100 on Linux.
        Duration::from_millis((ticks(11) + ticks(12)) * 10)
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
    let out =
        action_job_lines(ns, "{.metadata.labels.app} {.metadata.labels.ruleop\\.io/action}").expect("kubectl get jobs");
    let mut counts = BTreeMap::new();
    for line in out.lines().filter(|l| !l.is_empty()) {
        let (app, action) = line.split_once(' ').unwrap_or((line, ""));
        *counts.entry((app.to_owned(), action.to_owned())).or_insert(0) += 1;
    }
    counts
}

/// The action Jobs of `ns` (label `ruleop.io/action`), one line each of the JSONPath `fields`;
/// `None` when the API server does not answer (it may be restarting).
pub fn action_job_lines(ns: &str, fields: &str) -> Option<String> {
    job_lines(ns, "ruleop.io/action", fields)
}

/// The Jobs of action `action` in `ns`, one line each of the JSONPath `fields`.
pub fn jobs_of_action(ns: &str, action: &str, fields: &str) -> Vec<String> {
    job_lines(ns, &format!("ruleop.io/action={action}"), fields)
        .unwrap_or_else(|| panic!("listing the Jobs of action {action} in {ns}"))
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

fn job_lines(ns: &str, selector: &str, fields: &str) -> Option<String> {
    let out = super::kubectl(&[
        "get",
        "jobs",
        "-n",
        ns,
        "-l",
        selector,
        "--request-timeout=20s",
        "-o",
        &format!("jsonpath={{range .items[*]}}{fields}{{\"\\n\"}}{{end}}"),
    ]);
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
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

/// `(shard, value)` of every `name{shard="i"} v` sample of a scrape.
fn shard_series(text: &str, name: &str) -> Vec<(u32, u64)> {
    text.lines()
        .filter_map(|line| line.strip_prefix(name)?.strip_prefix("{shard=\""))
        .filter_map(|rest| {
            let (shard, rest) = rest.split_once('"')?;
            let value = rest.strip_prefix("} ")?.trim().parse::<f64>().ok()?;
            Some((shard.parse().ok()?, value as u64))
        })
        .collect()
}

/// A `kubectl get databases --watch` in one namespace: each change as it arrives, timed on
/// arrival, so a test learns when a parent converged without polling (a kubectl process per poll
/// costs a loaded machine more than the operator under test).
pub struct DatabaseWatch {
    child: std::process::Child,
    lines: std::sync::mpsc::Receiver<(std::time::Instant, String)>,
}

impl DatabaseWatch {
    /// Starts watching the Databases of `ns`.
    pub fn start(ns: &str) -> Self {
        use std::io::BufRead;
        let mut child = std::process::Command::new("kubectl")
            .args(["get", "databases", "-n", ns, "--watch", "-o"])
            .arg(
                "jsonpath={.metadata.name} {.metadata.generation} {.status.observedGeneration} \
                 {.status.actions.backup.guardValue} {.status.actions.backup.phase}{\"\\n\"}",
            )
            .env("KUBECONFIG", &super::control_plane().kubeconfig)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("kubectl get --watch");
        let stdout = child.stdout.take().expect("stdout");
        let (tx, lines) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send((std::time::Instant::now(), line)).is_err() {
                    return;
                }
            }
        });
        DatabaseWatch { child, lines }
    }

    /// Waits until each of `names` has been seen backed up at `generation` (reconciled at it,
    /// its backup for it done); returns when the last of them was seen so.
    pub fn backed_up(&self, names: &[String], generation: i64, timeout: Duration) -> std::time::Instant {
        let deadline = std::time::Instant::now() + timeout;
        let mut waiting: std::collections::BTreeSet<&str> = names.iter().map(String::as_str).collect();
        let mut last = std::time::Instant::now();
        let done = format!("{generation} {generation} generation={generation} Done");
        while !waiting.is_empty() {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let (at, line) = self
                .lines
                .recv_timeout(left)
                .unwrap_or_else(|_| panic!("timed out after {timeout:?}; still waiting for {waiting:?}"));
            if let Some((name, state)) = line.split_once(' ')
                && state.trim() == done
                && waiting.remove(name)
            {
                last = at;
            }
        }
        last
    }
}

impl Drop for DatabaseWatch {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
