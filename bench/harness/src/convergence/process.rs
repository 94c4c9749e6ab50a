//! Process contenders as child processes: start, readiness, reconcile counts, memory and CPU from
//! /proc, stop.

use std::collections::BTreeMap;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::process::{Child, Command};
use tokio::task::JoinHandle;

use crate::convergence::contenders::{Contender, Reconciles, Setup};
use crate::convergence::phases::Ctx;
use crate::convergence::plane::ControlPlane;
use crate::convergence::settings::Settings;
use crate::convergence::writes::sum_metric;

/// A running process contender.
pub struct Operator {
    /// The process (killed on drop).
    pub child: Child,
    /// Its pid, for /proc.
    pub pid: u32,
    /// When it was spawned.
    pub started: Instant,
    /// Its output.
    pub log: std::path::PathBuf,
    name: &'static str,
    ready: (String, &'static str, bool),
    reconciles: Reconciles,
}

impl Operator {
    /// Spawns `contender` for namespace `ns`.
    pub fn start(ctx: &Ctx<'_>, contender: &dyn Contender, ns: &str, setup: &Setup) -> Result<Operator> {
        let settings = ctx.settings;
        let launch = contender.launch(ctx, ns, setup)?;
        let stamp = jiff::Timestamp::now().as_millisecond();
        let log = settings.state.join(format!("{}-{ns}-{stamp}.log", contender.name()));
        let mut command: Command = launch.command;
        let started = Instant::now();
        let child = command
            .env("KUBECONFIG", &ctx.plane.kubeconfig)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log)?)
            .stderr(std::fs::File::create(&log)?.try_clone()?)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("start {}", contender.name()))?;
        let pid = child.id().context("child pid")?;
        record_pid(settings, pid);
        Ok(Operator {
            child,
            pid,
            started,
            log,
            name: contender.name(),
            ready: launch.ready,
            reconciles: launch.reconciles,
        })
    }

    /// Whether its readiness endpoint says ready.
    pub async fn ready(&self) -> bool {
        let (addr, path, body_ok) = &self.ready;
        http_get(addr, path)
            .await
            .is_some_and(|(code, body)| code == 200 && (!body_ok || body.starts_with("ok")))
    }

    /// Waits until ready.
    pub async fn wait_ready(&self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        while !self.ready().await {
            ensure!(
                Instant::now() < deadline,
                "{} not ready within {timeout:?} (log {})",
                self.name,
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Ok(())
    }

    /// Reconciles completed so far.
    pub async fn reconciles(&self) -> Option<u64> {
        match &self.reconciles {
            Reconciles::Metric { addr, name, labels } => {
                let (_, body) = http_get(addr, "/metrics").await?;
                Some(sum_metric(&body, name, labels))
            }
            Reconciles::Lines(file) => Some(std::fs::read_to_string(file).map_or(0, |t| t.lines().count() as u64)),
        }
    }

    /// ruleop's reconciles so far by what queued them (`ruleop_reconcile_triggers_total`, summed
    /// over rules); empty for a contender without that metric.
    pub async fn reconcile_triggers(&self) -> BTreeMap<String, u64> {
        let mut by = BTreeMap::new();
        let Reconciles::Metric { addr, .. } = &self.reconciles else {
            return by;
        };
        let Some((_, body)) = http_get(addr, "/metrics").await else {
            return by;
        };
        for line in body
            .lines()
            .filter(|l| l.starts_with("ruleop_reconcile_triggers_total{"))
        {
            let (labels, value) = ruleop_testkit::metrics::labels(line);
            if let (Some(trigger), Some(value)) = (labels.get("trigger"), value) {
                *by.entry((*trigger).to_owned()).or_default() += value as u64;
            }
        }
        by
    }

    /// Waits until `count` reconciles have completed.
    pub async fn wait_reconciles(&self, count: u64, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        loop {
            let now = self.reconciles().await.unwrap_or(0);
            if now >= count {
                return Ok(());
            }
            ensure!(
                Instant::now() < deadline,
                "{}: {now}/{count} reconciles after {timeout:?} (log {})",
                self.name,
                self.log.display()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A `Vm*` line of /proc/<pid>/status, in kB.
    pub fn proc_status(&self, key: &str) -> Option<u64> {
        proc_status(self.pid, key)
    }

    /// CPU seconds it has used so far (user + system, all threads).
    pub fn cpu_seconds(&self) -> Option<f64> {
        cpu_seconds(self.pid)
    }

    /// Whether it has exited, as a message.
    pub fn exited(&mut self) -> Option<String> {
        match self.child.try_wait() {
            Ok(Some(status)) => Some(format!("{} exited: {status} (log {})", self.name, self.log.display())),
            _ => None,
        }
    }

    /// SIGTERM, then SIGKILL after 30 s; returns a note when it did not exit by itself.
    pub async fn stop(mut self, phase: &str) -> Option<String> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid.to_string()])
            .status()
            .await;
        if tokio::time::timeout(Duration::from_secs(30), self.child.wait())
            .await
            .is_ok()
        {
            return None;
        }
        let _ = self.child.kill().await;
        let note = format!(
            "{} did not exit within 30 s of SIGTERM after the {phase} phase; killed (log {})",
            self.name,
            self.log.display()
        );
        eprintln!("   {note}");
        Some(note)
    }
}

/// Appends a pid to the state directory's bench-pids, which bench/run.sh kills on exit.
fn record_pid(settings: &Settings, pid: u32) {
    use std::io::Write;
    if let Ok(mut f) = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(settings.state.join("bench-pids"))
    {
        let _ = writeln!(f, "{pid}");
    }
}

/// A `Vm*` line of /proc/<pid>/status, in kB.
fn proc_status(pid: u32, key: &str) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    text.lines()
        .find_map(|l| l.strip_prefix(key)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
}

/// Clock ticks per second of /proc/<pid>/stat (`getconf CLK_TCK`; 100 on every Linux we run).
fn clock_ticks() -> f64 {
    static TICKS: OnceLock<f64> = OnceLock::new();
    *TICKS.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|o| String::from_utf8_lossy(&o.stdout).trim().parse().ok())
            .unwrap_or(100.0)
    })
}

/// Who used the machine's CPU over one timed window: the operator (none for the harness's own
/// floor) and the control plane's process, against what the machine's cores could give.
#[derive(Clone, Copy, Debug, Default)]
pub struct WindowCpu {
    /// The operator's CPU seconds.
    pub operator_s: Option<f64>,
    /// The control plane's (kube-apiserver with etcd).
    pub apiserver_s: Option<f64>,
    /// The window's length times the machine's cores.
    pub available_s: f64,
}

/// The CPU counters at the start of a window ([`WindowCpu`]).
pub struct CpuWindow<'a> {
    plane: &'a ControlPlane,
    operator: Option<&'a Operator>,
    apiserver_before: Option<f64>,
    operator_before: Option<f64>,
    start: Instant,
}

impl<'a> CpuWindow<'a> {
    /// Reads the counters now.
    pub fn start(plane: &'a ControlPlane, operator: Option<&'a Operator>) -> Self {
        CpuWindow {
            plane,
            operator,
            apiserver_before: plane.cpu_seconds(),
            operator_before: operator.and_then(Operator::cpu_seconds),
            start: Instant::now(),
        }
    }

    /// What was spent since [`CpuWindow::start`].
    pub fn stop(&self) -> WindowCpu {
        let cores = std::thread::available_parallelism().map_or(1, std::num::NonZero::get);
        let since = |before: Option<f64>, now: Option<f64>| now.zip(before).map(|(after, before)| after - before);
        WindowCpu {
            operator_s: since(self.operator_before, self.operator.and_then(Operator::cpu_seconds)),
            apiserver_s: since(self.apiserver_before, self.plane.cpu_seconds()),
            available_s: self.start.elapsed().as_secs_f64() * cores as f64,
        }
    }
}

/// utime + stime of /proc/<pid>/stat (fields 14 and 15), in seconds.
pub fn cpu_seconds(pid: u32) -> Option<f64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name (field 2) is in parentheses and may hold spaces: count after the last ')'.
    let fields: Vec<&str> = text.rsplit_once(')')?.1.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    Some((utime + stime) / clock_ticks())
}

/// Samples VmRSS every 100 ms; `stop` returns the maximum seen.
pub struct RssSampler {
    max: Arc<AtomicU64>,
    task: JoinHandle<()>,
}

impl RssSampler {
    /// Starts sampling `pid`.
    pub fn start(pid: u32) -> Self {
        let max = Arc::new(AtomicU64::new(0));
        let m = max.clone();
        let task = tokio::spawn(async move {
            loop {
                if let Some(kb) = proc_status(pid, "VmRSS") {
                    m.fetch_max(kb, Ordering::Relaxed);
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        RssSampler { max, task }
    }

    /// The largest VmRSS seen, in kB.
    pub fn stop(self) -> u64 {
        self.task.abort();
        self.max.load(Ordering::Relaxed)
    }
}

/// A plain HTTP/1.1 GET on loopback: (status code, body).
async fn http_get(addr: &str, path: &str) -> Option<(u16, String)> {
    let fetch = async {
        let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
        let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        stream.write_all(request.as_bytes()).await.ok()?;
        let mut response = Vec::new();
        stream.read_to_end(&mut response).await.ok()?;
        let response = String::from_utf8_lossy(&response);
        let (head, body) = response.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        let chunked = head
            .lines()
            .any(|l| l.to_ascii_lowercase().replace(' ', "") == "transfer-encoding:chunked");
        Some((code, if chunked { dechunk(body)? } else { body.to_owned() }))
    };
    tokio::time::timeout(Duration::from_secs(5), fetch).await.ok().flatten()
}

/// The body of a `Transfer-Encoding: chunked` response (Go's HTTP servers send /metrics so).
fn dechunk(mut body: &str) -> Option<String> {
    let mut out = String::new();
    loop {
        let (size, rest) = body.split_once("\r\n")?;
        let size = usize::from_str_radix(size.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(out);
        }
        out.push_str(rest.get(..size)?);
        body = rest.get(size..)?.strip_prefix("\r\n")?;
    }
}
