//! Injecting each fault: kills, API server restarts, storms of new generations and backup
//! requests, rule reloads, a stalled connection and etcd compaction.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::soak::checks::{BACKUP_REQUEST, Ledger};
use crate::soak::proxy::StallProxy;
use crate::soak::replicas::Replicas;
use crate::soak::schedule::Fault;
use ruleop_testkit::etcd::{compact_etcd, etcd_client_url};
use ruleop_testkit::{ControlPlane, kubectl, kubectl_ok, sum_metric};

/// The annotation each rule reload sets on every Service (through the Service template).
pub const RELOAD_ANNOTATION: &str = "soak.ruleop.io/reload";

/// What faults act on, and what they have done so far.
pub struct Chaos<'a> {
    pub plane: &'a ControlPlane,
    pub proxy: &'a StallProxy,
    pub replicas: &'a mut Replicas,
    pub ns: &'a str,
    /// The templates directory the replicas read.
    pub templates: &'a Path,
    pub ledger: &'a mut Ledger,
    /// Parent names by index.
    pub names: &'a [String],
    /// Spec edits and backup requests sent so far (each one a new value).
    pub edits: u64,
    /// Reloads done (the value of [`RELOAD_ANNOTATION`] the Services should end with).
    pub reloads: u64,
    /// When a running stall is to end.
    pub stall_until: Option<Instant>,
    /// 410 responses the API server counted, over its restarts (its counters start again at 0).
    pub gone: u64,
    gone_baseline: u64,
}

/// One injected fault, for the report.
#[derive(Clone, Debug)]
pub struct Injected {
    /// Seconds since the fault window began, at the start and the end of the injection.
    pub at: f64,
    pub done: f64,
    pub kind: &'static str,
    pub detail: String,
}

impl<'a> Chaos<'a> {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        plane: &'a ControlPlane,
        proxy: &'a StallProxy,
        replicas: &'a mut Replicas,
        ns: &'a str,
        templates: &'a Path,
        ledger: &'a mut Ledger,
        names: &'a [String],
    ) -> Self {
        let gone_baseline = apiserver_gone().unwrap_or(0);
        Chaos {
            plane,
            proxy,
            replicas,
            ns,
            templates,
            ledger,
            names,
            edits: 0,
            reloads: 0,
            stall_until: None,
            gone: 0,
            gone_baseline,
        }
    }

    /// Injects `fault`; returns a sentence on what was done.
    pub fn inject(&mut self, fault: &Fault) -> String {
        match fault {
            Fault::Kill { replica } => {
                self.replicas.kill(*replica);
                format!("replica {replica} SIGKILLed and started again")
            }
            Fault::ApiServerRestart { down } => self.restart_apiserver(*down),
            Fault::SpecStorm { parents, edits } => self.storm(parents, *edits, false),
            Fault::AnnotationStorm { parents, edits } => self.storm(parents, *edits, true),
            Fault::Reload => self.reload(),
            Fault::Stall { stall } => {
                if self.proxy.is_paused() {
                    // Overlapping stalls make one longer stall.
                    self.stall_until = self.stall_until.max(Some(Instant::now() + *stall));
                    return format!("replica 0's stall extended by {} s", stall.as_secs());
                }
                self.proxy.pause();
                self.stall_until = Some(Instant::now() + *stall);
                format!(
                    "replica 0's connections to the API server paused for {} s",
                    stall.as_secs()
                )
            }
            Fault::Compaction => self.compact(),
        }
    }

    /// Ends a stall whose time is up (or any, with `now`); whether one ended.
    pub fn end_stall(&mut self, now: bool) -> bool {
        let due = self.stall_until.is_some_and(|until| now || Instant::now() >= until);
        if due {
            self.proxy.resume();
            self.stall_until = None;
        }
        due
    }

    fn restart_apiserver(&mut self, down: Duration) -> String {
        self.count_gone();
        let stopped = self.plane.stop();
        std::thread::sleep(down);
        let ready = self.plane.start();
        self.gone_baseline = 0;
        format!(
            "SIGTERM, exit in {:.1} s, down {} s, READY {:.1} s after the start",
            stopped.as_secs_f64(),
            down.as_secs(),
            ready.as_secs_f64()
        )
    }

    /// Adds the API server's 410 responses since the last reading to [`Chaos::gone`].
    pub fn count_gone(&mut self) {
        if let Some(now) = apiserver_gone() {
            self.gone += now.saturating_sub(self.gone_baseline);
            self.gone_baseline = now;
        }
    }

    /// `edits` rounds over `parents`: each round one server-side apply of every parent's new
    /// `spec.version` (a new generation) or new backup request value.
    ///
    /// The two storms apply as two field managers. Under one, a request storm's apply (the
    /// annotation alone) gave up the `spec.version` an earlier edit storm had applied, the API
    /// server removed it, and the required field's absence refused the parent's request: before
    /// 2026-12-07 most request rounds of a long soak were refused so.
    fn storm(&mut self, parents: &[usize], edits: u32, annotation: bool) -> String {
        let mut failed = 0;
        for _ in 0..edits {
            let mut docs = String::new();
            for &i in parents {
                self.edits += 1;
                let name = &self.names[i];
                let change = if annotation {
                    let value = format!("soak-{}", self.edits);
                    self.ledger
                        .requests
                        .entry(name.clone())
                        .or_default()
                        .push(value.clone());
                    format!("  annotations:\n    {BACKUP_REQUEST}: {value}\n")
                } else {
                    String::new()
                };
                let spec = if annotation {
                    String::new()
                } else {
                    format!("spec:\n  version: \"16.{}\"\n", self.edits)
                };
                docs.push_str(&format!(
                    "---\napiVersion: myorg.io/v1\nkind: Database\nmetadata:\n  name: {name}\n{change}{spec}"
                ));
            }
            let out = ruleop_testkit::kubectl_with_stdin(
                &[
                    "apply",
                    "--server-side",
                    "--force-conflicts",
                    if annotation {
                        "--field-manager=soak-request"
                    } else {
                        "--field-manager=soak-edit"
                    },
                    "-n",
                    self.ns,
                    "-f",
                    "-",
                ],
                Some(&docs),
            );
            if !out.status.success() {
                failed += 1;
            }
        }
        let what = if annotation { "backup request" } else { "spec edit" };
        format!(
            "{} parents, {edits} {what}{} each{}",
            parents.len(),
            if edits == 1 { "" } else { "s" },
            if failed > 0 {
                format!(" ({failed} rounds refused)")
            } else {
                String::new()
            }
        )
    }

    /// Edits the Service template the replicas read: a new value of [`RELOAD_ANNOTATION`],
    /// written aside and renamed over the old file (as an editor or the kubelet would).
    fn reload(&mut self) -> String {
        self.reloads += 1;
        let path = self.templates.join("database/service.yaml.j2");
        let text = std::fs::read_to_string(&path).expect("the Service template");
        let head = "metadata:\n  name: {{ metadata.name }}-svc\n";
        let base = match text.split_once(&format!("{head}  annotations:\n")) {
            // Drop the previous reload's line.
            Some((before, after)) => format!("{before}{head}{}", after.split_once('\n').map_or("", |(_, rest)| rest)),
            None => text,
        };
        let edited = base.replacen(
            head,
            &format!("{head}  annotations:\n    {RELOAD_ANNOTATION}: \"{}\"\n", self.reloads),
            1,
        );
        assert_ne!(edited, base, "the Service template has the expected metadata");
        let aside: PathBuf = std::env::temp_dir().join(format!("soak-service-{}.yaml.j2", std::process::id()));
        std::fs::write(&aside, edited).expect("write the new template aside");
        std::fs::rename(&aside, &path).expect("rename it over the old one");
        format!("Service template edited ({RELOAD_ANNOTATION}: \"{}\")", self.reloads)
    }

    fn compact(&mut self) -> String {
        let Some(url) = etcd_client_url(self.plane) else {
            return "skipped: the plane does not say where its etcd is".to_owned();
        };
        match compact_etcd(&url) {
            Ok(revision) => format!("etcd compacted to revision {revision}"),
            Err(error) => format!("compaction failed: {error}"),
        }
    }
}

/// The API server's count of 410 responses, if it answers.
fn apiserver_gone() -> Option<u64> {
    let out = kubectl(&["get", "--raw", "/metrics", "--request-timeout=20s"]);
    out.status.success().then(|| {
        sum_metric(
            &String::from_utf8_lossy(&out.stdout),
            "apiserver_request_total",
            &[("code", "410")],
        )
    })
}

/// Services of `ns` carrying `reload` as [`RELOAD_ANNOTATION`], and all Services.
pub fn services_reloaded(ns: &str, reload: u64) -> (usize, usize) {
    let out = kubectl_ok(&[
        "get",
        "services",
        "-n",
        ns,
        "-o",
        "jsonpath={range .items[*]}{.metadata.annotations.soak\\.ruleop\\.io/reload}{\"\\n\"}{end}",
    ]);
    let lines: Vec<&str> = out.lines().collect();
    let want = reload.to_string();
    (lines.iter().filter(|v| **v == want).count(), lines.len())
}
