//! The three `ruleop run --shards 12` replicas under test: started, SIGKILLed and started again,
//! their memory sampled from /proc, and every log any of them wrote kept for the panic check.

use std::path::{Path, PathBuf};
use std::time::Duration;

use ruleop_testkit::fleet::replica_flags;
use ruleop_testkit::{Operator, wait_until};

/// One replica slot: the process now in it and how many processes it has had.
struct Slot {
    operator: Operator,
    kubeconfig: PathBuf,
    incarnation: usize,
}

/// The replicas, by slot.
pub struct Replicas {
    slots: Vec<Slot>,
    rules: PathBuf,
    templates: PathBuf,
    ns: String,
    /// Logs of processes that were killed.
    old_logs: Vec<PathBuf>,
}

/// A memory sample of one replica process.
#[derive(Clone, Copy, Debug)]
pub struct RssSample {
    /// Seconds since the fault window began.
    pub t: f64,
    pub slot: usize,
    pub incarnation: usize,
    pub bytes: u64,
}

const SHARDS: [&str; 2] = ["--shards", "12"];

impl Replicas {
    /// Starts one replica per kubeconfig (slot i talks to the API server through
    /// `kubeconfigs[i]`) and waits until each is ready.
    pub fn start(kubeconfigs: &[PathBuf], rules: &Path, templates: &Path, ns: &str) -> Self {
        let slots = kubeconfigs
            .iter()
            .map(|kubeconfig| Slot {
                operator: Operator::start_on(kubeconfig, rules, templates, ns, &replica_flags(ns, &SHARDS)),
                kubeconfig: kubeconfig.clone(),
                incarnation: 0,
            })
            .collect();
        Replicas {
            slots,
            rules: rules.to_owned(),
            templates: templates.to_owned(),
            ns: ns.to_owned(),
            old_logs: Vec::new(),
        }
    }

    /// Waits until the 12 shards are spread 4/4/4.
    pub fn wait_spread(&self, timeout: Duration) -> Duration {
        wait_until(timeout, "the shards to spread 4/4/4", || {
            self.slots.iter().all(|s| s.operator.shards_held() == Some(4))
        })
    }

    /// SIGKILLs the replica in `slot` and starts another in its place at once (not waiting for
    /// it: the API server may be unreachable from it, through a stalled proxy).
    pub fn kill(&mut self, slot: usize) {
        let old = self.slots.remove(slot);
        self.old_logs.push(old.operator.log.clone());
        old.operator.kill();
        let flags = replica_flags(&self.ns, &SHARDS);
        let operator = Operator::launch(&old.kubeconfig, &self.rules, &self.templates, &self.ns, &flags);
        self.slots.insert(
            slot,
            Slot {
                operator,
                kubeconfig: old.kubeconfig,
                incarnation: old.incarnation + 1,
            },
        );
    }

    /// Whether every replica process is running.
    pub fn all_running(&mut self) -> bool {
        self.slots.iter_mut().all(|s| s.operator.is_running())
    }

    /// Whether every replica answers `/readyz` ok.
    pub fn all_ready(&self) -> bool {
        self.slots.iter().all(|s| s.operator.ready())
    }

    /// Each replica's RSS now.
    pub fn sample(&self, t: f64) -> Vec<RssSample> {
        self.slots
            .iter()
            .enumerate()
            .map(|(slot, s)| RssSample {
                t,
                slot,
                incarnation: s.incarnation,
                bytes: s.operator.rss(),
            })
            .collect()
    }

    /// How many processes each slot has had.
    pub fn incarnations(&self) -> Vec<usize> {
        self.slots.iter().map(|s| s.incarnation + 1).collect()
    }

    /// Every log written so far, the killed processes' too.
    pub fn logs(&self) -> Vec<PathBuf> {
        self.old_logs
            .iter()
            .cloned()
            .chain(self.slots.iter().map(|s| s.operator.log.clone()))
            .collect()
    }
}

/// Panics in `logs`: each log's first line mentioning a panic, by file.
pub fn panics(logs: &[PathBuf]) -> Vec<String> {
    logs.iter()
        .filter_map(|log| {
            let text = std::fs::read_to_string(log).unwrap_or_default();
            let line = text.lines().find(|l| l.contains("panicked at"))?;
            Some(format!("{}: {line}", log.display()))
        })
        .collect()
}

/// Lines of `logs` on an expired watch (the API server's 410 Gone: "too old resource version").
pub fn expired_watch_lines(logs: &[PathBuf]) -> usize {
    logs.iter()
        .map(|log| {
            std::fs::read_to_string(log)
                .unwrap_or_default()
                .lines()
                .filter(|l| l.contains("too old resource version") || l.contains("410 Gone"))
                .count()
        })
        .sum()
}
