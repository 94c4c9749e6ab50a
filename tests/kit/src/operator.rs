//! `ruleop` processes: a one-shot command, or `ruleop run` as a child process with its admin port.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use super::*;

/// A free TCP port on 127.0.0.1, never the same twice in a test run.
///
/// Not a port the kernel picks (`:0`): those come from the ephemeral range (32768-60999), where
/// every outgoing connection (kubectl's, the operators') also takes its local port, so between
/// this check and the bind of the process that uses the port another socket could take it
/// (seen: "binding the admin address: Address already in use"). Ports here come from 10000-31999
/// instead, in a block of 120 chosen by the process id.
pub fn free_port() -> u16 {
    static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    const BLOCK: u32 = 120;
    let base = 10_000 + (std::process::id() % 183) * BLOCK;
    for _ in 0..BLOCK {
        let offset = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % BLOCK;
        let port = u16::try_from(base + offset).expect("port in range");
        if TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return port;
        }
    }
    panic!("no free port in 127.0.0.1:{base}-{}", base + BLOCK - 1)
}

/// The ruleop binary tests and measurements run: `RULEOP_BIN` when set, else [`built_binary`].
pub fn binary() -> PathBuf {
    if let Some(bin) = std::env::var_os("RULEOP_BIN").filter(|bin| !bin.is_empty()) {
        return PathBuf::from(bin);
    }
    let bin = built_binary();
    assert!(
        bin.exists(),
        "{} missing: build it (cargo build --bin ruleop, in the same profile) or set RULEOP_BIN",
        bin.display()
    );
    bin
}

/// The `ruleop` cargo built beside the running program, in `target/<profile>/`: an integration
/// test runs from `target/<profile>/deps/` (cargo builds `ruleop` for it), the measurement tool
/// from `target/<profile>/` (bench/tool.sh builds `ruleop` with it).
pub fn built_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the running program's path");
    let mut dir = exe.parent().expect("the program's directory").to_path_buf();
    if dir.ends_with("deps") {
        dir.pop();
    }
    dir.join(format!("ruleop{}", std::env::consts::EXE_SUFFIX))
}

/// Runs a one-shot ruleop command (`args`, then `--rules`, `--templates`) against this test
/// binary's control plane, with no namespace or rules from the environment.
pub fn ruleop_command(args: &[&str], rules: &Path, templates: &Path) -> Output {
    Command::new(binary())
        .args(args)
        .arg("--rules")
        .arg(rules)
        .arg("--templates")
        .arg(templates)
        .env("KUBECONFIG", &control_plane().kubeconfig)
        .env_remove("RULEOP_NAMESPACE")
        .env_remove("RULEOP_RULES")
        .env_remove("RULEOP_TEMPLATES")
        .output()
        .expect("ruleop runs")
}

/// A `ruleop run` child process, stopped with SIGTERM when dropped.
pub struct Operator {
    child: Child,
    /// Admin address (metrics).
    pub admin: String,
    /// Its log file.
    pub log: PathBuf,
}

impl Operator {
    /// Starts `ruleop run` for one namespace and waits until it is ready.
    pub fn start(rules: &Path, templates: &Path, namespace: &str) -> Self {
        Self::start_with(rules, templates, namespace, &[])
    }

    /// Like [`Operator::start`], with extra flags.
    pub fn start_with(rules: &Path, templates: &Path, namespace: &str, extra: &[&str]) -> Self {
        Self::start_on(&control_plane().kubeconfig, rules, templates, namespace, extra)
    }

    /// Like [`Operator::start_with`], against the control plane of `kubeconfig`.
    pub fn start_on(kubeconfig: &Path, rules: &Path, templates: &Path, namespace: &str, extra: &[&str]) -> Self {
        let operator = Self::spawn_on(kubeconfig, rules, templates, namespace, extra);
        wait_until(Duration::from_secs(30), "ruleop to be ready", || operator.ready());
        operator
    }

    /// Like [`Operator::start_on`], returning once the admin endpoints answer, ready or not.
    pub fn spawn_on(kubeconfig: &Path, rules: &Path, templates: &Path, namespace: &str, extra: &[&str]) -> Self {
        let operator = Self::launch(kubeconfig, rules, templates, namespace, extra);
        wait_until(Duration::from_secs(30), "ruleop's admin endpoints", || {
            operator.get_status("/healthz").is_some()
        });
        operator
    }

    /// Starts `ruleop run` and returns at once, before it has done anything.
    pub fn launch(kubeconfig: &Path, rules: &Path, templates: &Path, namespace: &str, extra: &[&str]) -> Self {
        let admin = format!("127.0.0.1:{}", free_port());
        let log = std::env::temp_dir().join(format!("ruleop-{namespace}-{}.log", free_port()));
        let log_file = std::fs::File::create(&log).expect("log file");
        let child = Command::new(binary())
            .arg("run")
            .args([
                "--rules",
                &rules.display().to_string(),
                "--templates",
                &templates.display().to_string(),
            ])
            .args(["--namespace", namespace, "--admin-addr", &admin])
            .args(extra)
            .env("KUBECONFIG", kubeconfig)
            .env("RUST_LOG", "info,ruleop=debug,kube=warn,kube_runtime::controller=info")
            .env("NO_COLOR", "1")
            // The allocator settings the Deployment (deploy/helm/ruleop/templates/deployment.yaml) runs ruleop with.
            .env("MIMALLOC_ALLOW_THP", "0")
            .env("MIMALLOC_PURGE_DELAY", "0")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log_file)
            .spawn()
            .expect("start ruleop");
        Operator { child, admin, log }
    }

    /// Whether `/readyz` answers 200 `ok`.
    pub fn ready(&self) -> bool {
        self.get("/readyz").is_some_and(|body| body.starts_with("ok"))
    }

    /// Reconciles of `rule` finished so far, whatever their result.
    pub fn reconciles(&self, rule: &str) -> u64 {
        self.metric("ruleop_reconciles_total", &[("rule", rule)])
    }

    /// Runs `event`, then waits until a reconcile of `rule` that began after it has finished, so
    /// that a check for "nothing happened" that follows can fail. The count is taken once no
    /// reconcile has finished for 300 ms: a reconcile still in flight when `event` runs would
    /// otherwise be mistaken for the one it causes (a missed quiet period only makes the wait
    /// end early, never fail).
    pub fn reconciled_after(&self, rule: &str, event: impl FnOnce()) {
        let before = self.idle_reconciles(rule);
        event();
        wait_until(
            Duration::from_secs(30),
            &format!("a reconcile of rule {rule} after the event"),
            || self.reconciles(rule) > before,
        );
    }

    /// Waits until no reconcile of `rule` has finished for 300 ms (the operator is idle: what
    /// it was reconciling has been written) and returns the count of reconciles then.
    pub fn idle_reconciles(&self, rule: &str) -> u64 {
        self.idle_for(rule, Duration::from_millis(300))
    }

    /// Waits until no reconcile of `rule` has finished for `quiet` and returns the count of
    /// reconciles then.
    pub fn idle_for(&self, rule: &str, quiet: Duration) -> u64 {
        let mut count = self.reconciles(rule);
        let mut changed = Instant::now();
        wait_until(Duration::from_secs(30), "the operator to be idle", || {
            let now = self.reconciles(rule);
            if now != count {
                count = now;
                changed = Instant::now();
            }
            changed.elapsed() >= quiet
        });
        count
    }

    /// GETs an admin path; `None` if it does not answer 200.
    pub fn get(&self, path: &str) -> Option<String> {
        self.get_status(path)
            .and_then(|(code, body)| (code == 200).then_some(body))
    }

    /// GETs an admin path: the status code and body, `None` if it does not answer at all.
    pub fn get_status(&self, path: &str) -> Option<(u16, String)> {
        use std::io::{Read, Write};
        let mut stream = std::net::TcpStream::connect(&self.admin).ok()?;
        stream
            .write_all(format!("GET {path} HTTP/1.1\r\nhost: x\r\n\r\n").as_bytes())
            .ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        let (head, body) = response.split_once("\r\n\r\n")?;
        let code = head.split_whitespace().nth(1)?.parse().ok()?;
        Some((code, body.to_owned()))
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Whether the process is still running.
    pub fn is_running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The sum of a ruleop counter over series containing every `key="value"` in `filter`.
    pub fn metric(&self, name: &str, filter: &[(&str, &str)]) -> u64 {
        sum_metric(&self.get("/metrics").unwrap_or_default(), name, filter)
    }

    /// The operator's log so far.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Sends SIGTERM and waits for exit; returns whether it exited successfully.
    pub fn stop(mut self) -> bool {
        self.terminate()
    }

    fn terminate(&mut self) -> bool {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.child.try_wait() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        false
    }

    /// Sends SIGTERM and returns how long it took to exit, or `None` if it still ran after
    /// `within` (then it is killed).
    pub fn terminate_within(mut self, within: Duration) -> Option<Duration> {
        let sent = Instant::now();
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        while sent.elapsed() < within {
            if let Ok(Some(_)) = self.child.try_wait() {
                return Some(sent.elapsed());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        None
    }

    /// Kills it with SIGKILL (no chance to clean up).
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Operator {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            self.terminate();
        }
    }
}
