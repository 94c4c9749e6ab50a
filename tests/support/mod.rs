//! Test support for integration tests against the real control plane in tests/apiserver.
//!
//! The control plane is started once per test binary (or reused when `KUBECONFIG` is set, as
//! `make test` does); it exits when this process does (it watches its stdin). Each test gets
//! its own namespace and, when it needs one, its own `ruleop run` child process.
#![allow(dead_code)]

pub mod audit;
pub mod console;
pub mod custom;
pub mod exposition;
pub mod fleet;
pub mod metrics;
pub mod mount;
pub mod node;
pub mod webhook;
pub mod writes;

pub use metrics::sum_metric;

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The project root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// A running (or reused) control plane.
pub struct ControlPlane {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The process when this test binary started it (`None` while stopped or when reused).
    process: Mutex<Option<(Child, ChildStdin)>>,
    /// The data directory of a restartable plane (see [`restartable_control_plane`]).
    data_dir: Option<tempfile::TempDir>,
    /// Whether it has a node (see [`node_control_plane`]).
    node: bool,
}

static PLANE: OnceLock<ControlPlane> = OnceLock::new();

/// The control plane of this test run, started on first use.
pub fn control_plane() -> &'static ControlPlane {
    PLANE.get_or_init(|| {
        if let Ok(path) = std::env::var("KUBECONFIG")
            && !path.is_empty()
        {
            return ControlPlane {
                kubeconfig: PathBuf::from(path),
                process: Mutex::new(None),
                data_dir: None,
                node: false,
            };
        }
        let (child, stdin, kubeconfig) = start_apiserver(&[]);
        ControlPlane {
            kubeconfig,
            process: Mutex::new(Some((child, stdin))),
            data_dir: None,
            node: false,
        }
    })
}

/// Makes this test binary's control plane one of its own with a data directory, even when
/// `KUBECONFIG` names a shared one, so a test can stop and start it (an API server outage)
/// without disturbing other tests. Every helper (kubectl, [`Operator`], ...) then uses it. Call
/// it first: it panics if another control plane is already in use.
pub fn restartable_control_plane() -> &'static ControlPlane {
    let plane = PLANE.get_or_init(|| {
        let dir = tempfile::tempdir().expect("data dir");
        let (child, stdin, kubeconfig) = start_apiserver(&["--data-dir", &dir.path().display().to_string()]);
        ControlPlane {
            kubeconfig,
            process: Mutex::new(Some((child, stdin))),
            data_dir: Some(dir),
            node: false,
        }
    });
    assert!(
        plane.data_dir.is_some(),
        "restartable_control_plane() must be called before any other use of the control plane"
    );
    plane
}

/// Makes this test binary's control plane the one with a node (tests/node, see [`node`]):
/// reused from `RULEOP_NODE_KUBECONFIG` (`make test` starts it), or started with `ctl.sh start
/// --node` and stopped after this process exits. Call it first: it panics if another control
/// plane is already in use.
pub fn node_control_plane() -> &'static ControlPlane {
    let plane = PLANE.get_or_init(node::control_plane);
    assert!(
        plane.node,
        "node_control_plane() must be called before any other use of the control plane"
    );
    plane
}

impl ControlPlane {
    /// Stops a restartable control plane with SIGTERM, keeping its data; returns how long it
    /// took to exit.
    pub fn stop(&self) -> Duration {
        assert!(
            self.data_dir.is_some(),
            "only a restartable control plane can be stopped"
        );
        let mut process = self.process.lock().expect("control plane lock");
        let (mut child, stdin) = process.take().expect("the control plane is running");
        let start = Instant::now();
        let _ = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        while child.try_wait().ok().flatten().is_none() {
            assert!(
                start.elapsed() < Duration::from_secs(60),
                "the control plane ignored SIGTERM for 60 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        drop(stdin);
        start.elapsed()
    }

    /// Starts a stopped restartable control plane again on its data directory: same port, CA,
    /// tokens and etcd data, so clients reconnect to it. Returns the time to READY.
    pub fn start(&self) -> Duration {
        let dir = self
            .data_dir
            .as_ref()
            .expect("only a restartable control plane can be started");
        let mut process = self.process.lock().expect("control plane lock");
        assert!(process.is_none(), "the control plane is already running");
        let start = Instant::now();
        let (child, stdin, kubeconfig) = start_apiserver(&["--data-dir", &dir.path().display().to_string()]);
        assert_eq!(kubeconfig, self.kubeconfig, "a restart keeps the kubeconfig");
        *process = Some((child, stdin));
        start.elapsed()
    }
}

/// Builds (if needed) and starts a control plane; returns it with the kubeconfig path.
pub fn start_apiserver(extra: &[&str]) -> (Child, ChildStdin, PathBuf) {
    let bin = root().join("tests/apiserver/bin/apiserver");
    if !bin.exists() {
        let status = Command::new(root().join("tests/apiserver/ctl.sh"))
            .arg("build")
            .status()
            .expect("ctl.sh build");
        assert!(status.success(), "building the control plane failed");
    }
    let mut child = Command::new(&bin)
        .arg("--exit-with-stdin")
        .args(extra)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("start the control plane");
    let stdin = child.stdin.take().expect("stdin");
    let stdout = child.stdout.take().expect("stdout");
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).expect("read READY line");
    let path = line
        .trim()
        .strip_prefix("READY kubeconfig=")
        .unwrap_or_else(|| panic!("unexpected first line from the control plane: {line:?}"));
    (child, stdin, PathBuf::from(path))
}

/// Runs kubectl against the control plane.
pub fn kubectl(args: &[&str]) -> Output {
    kubectl_with_stdin(args, None)
}

/// Runs kubectl with `input` on stdin.
pub fn kubectl_with_stdin(args: &[&str], input: Option<&str>) -> Output {
    kubectl_at(&control_plane().kubeconfig, args, input)
}

/// Runs kubectl with `input` on stdin against the control plane of `kubeconfig`.
pub fn kubectl_at(kubeconfig: &Path, args: &[&str], input: Option<&str>) -> Output {
    use std::io::Write;
    let mut child = Command::new("kubectl")
        .args(args)
        .env("KUBECONFIG", kubeconfig)
        .stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kubectl runs");
    if let Some(input) = input {
        child
            .stdin
            .take()
            .expect("stdin")
            .write_all(input.as_bytes())
            .expect("write stdin");
    }
    child.wait_with_output().expect("kubectl finishes")
}

/// Runs kubectl and returns stdout, panicking with stderr on failure.
pub fn kubectl_ok(args: &[&str]) -> String {
    let out = kubectl(args);
    assert!(
        out.status.success(),
        "kubectl {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `kubectl apply -f -` of some YAML.
pub fn apply_yaml(namespace: &str, yaml: &str) {
    let out = kubectl_with_stdin(&["apply", "-n", namespace, "-f", "-"], Some(yaml));
    assert!(
        out.status.success(),
        "kubectl apply failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `kubectl patch --type=merge` of one object.
pub fn merge_patch(namespace: &str, what: &str, patch: &str) {
    kubectl_ok(&["patch", "-n", namespace, what, "--type=merge", "-p", patch]);
}

/// `kubectl patch --subresource=status --type=merge` of one object.
pub fn merge_patch_status(namespace: &str, what: &str, patch: &str) {
    kubectl_ok(&[
        "patch",
        "-n",
        namespace,
        what,
        "--subresource=status",
        "--type=merge",
        "-p",
        patch,
    ]);
}

/// A JSONPath read of an object; empty if it does not exist.
pub fn get(namespace: &str, what: &str, jsonpath: &str) -> String {
    let out = kubectl(&["get", "-n", namespace, what, "-o", &format!("jsonpath={jsonpath}")]);
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Whether an object exists.
pub fn exists(namespace: &str, what: &str) -> bool {
    kubectl(&["get", "-n", namespace, what]).status.success()
}

/// Installs the shipped CRDs (idempotent) and waits until they are served.
pub fn install_crds() {
    static DONE: OnceLock<()> = OnceLock::new();
    DONE.get_or_init(|| {
        kubectl_ok(&["apply", "-f", &root().join("deploy/crds").display().to_string()]);
        kubectl_ok(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"]);
    });
}

/// Polls `check` every 100 ms until it is true, panicking after `timeout`.
pub fn wait_until(timeout: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let start = Instant::now();
    while !check() {
        assert!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    start.elapsed()
}

/// A namespace of its own for one test, deleted when dropped.
pub struct Namespace(pub String);

impl Namespace {
    /// Creates `<prefix>-<random>`.
    pub fn new(prefix: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let name = format!("{prefix}-{:x}", nanos ^ std::process::id());
        kubectl_ok(&["create", "namespace", &name]);
        Namespace(name)
    }
}

impl Drop for Namespace {
    fn drop(&mut self) {
        let _ = kubectl(&["delete", "namespace", &self.0, "--wait=false"]);
    }
}

/// A free TCP port on 127.0.0.1, never the same twice in a test binary.
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

/// The ruleop binary tests run: `RULEOP_BIN` when set (a release build, for measurements),
/// else the one cargo built for this test binary.
pub fn binary() -> PathBuf {
    std::env::var_os("RULEOP_BIN")
        .filter(|bin| !bin.is_empty())
        .map_or_else(|| PathBuf::from(env!("CARGO_BIN_EXE_ruleop")), PathBuf::from)
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

/// The text of a command's output.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
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
            // The allocator settings deploy/deployment.yaml runs ruleop with.
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
        let quiet = Duration::from_millis(300);
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

/// Open watches the API server is serving on `resource` with `scope` (`namespace`, `cluster`),
/// from its own `apiserver_longrunning_requests` gauge.
pub fn apiserver_watches(resource: &str, scope: &str) -> u64 {
    let text = kubectl_ok(&["get", "--raw", "/metrics"]);
    sum_metric(
        &text,
        "apiserver_longrunning_requests",
        &[("verb", "WATCH"), ("resource", resource), ("scope", scope)],
    )
}

/// A kubeconfig that authenticates as ServiceAccount `namespace/name` (a token from
/// `kubectl create token`) to the test control plane; the file lives as long as the TempDir.
pub fn service_account_kubeconfig(namespace: &str, name: &str) -> (tempfile::TempDir, PathBuf) {
    let token = kubectl_ok(&["create", "token", name, "-n", namespace, "--duration=1h"]);
    let field = |path: &str| kubectl_ok(&["config", "view", "--raw", "--minify", "-o", &format!("jsonpath={path}")]);
    let server = field("{.clusters[0].cluster.server}");
    let ca = field("{.clusters[0].cluster.certificate-authority-data}");
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("kubeconfig");
    let text = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: {name}\n  user:\n    token: {}\ncontexts:\n- name: test\n  context: {{cluster: test, user: {name}, namespace: {namespace}}}\ncurrent-context: test\n",
        token.trim()
    );
    std::fs::write(&path, text).expect("write kubeconfig");
    (dir, path)
}

/// A rules directory: the shipped rules with `edit` applied to each file's text.
pub fn rules_dir(edit: impl Fn(&str) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(root().join("rules")).expect("rules").flatten() {
        let text = std::fs::read_to_string(entry.path()).expect("read rule");
        std::fs::write(dir.path().join(entry.file_name()), edit(&text)).expect("write rule");
    }
    dir
}

/// The shipped rules plus a webhook action `notify` (once per generation) to `url`.
pub fn rules_with_webhook(url: &str) -> tempfile::TempDir {
    let origin = url.trim_end_matches("/hook").to_owned();
    rules_with_http_action(url, &format!("[{origin:?}]"))
}

/// The shipped rules plus a webhook action `notify` to `url`, allowed to reach `allowed_hosts`
/// (a YAML flow list).
pub fn rules_with_http_action(url: &str, allowed_hosts: &str) -> tempfile::TempDir {
    let url = url.to_owned();
    let allowed_hosts = allowed_hosts.to_owned();
    rules_dir(move |text| {
        if !text.contains("name: database") {
            return text.to_owned();
        }
        text.replace(
            "  actions:\n",
            &format!(
                "  actions:\n    - id: notify\n      guard: {{generation: true}}\n      http:\n        url: {url}\n        allowedHosts: {allowed_hosts}\n        body: '{{\"db\": {{{{ metadata.name | tojson }}}}, \"generation\": {{{{ metadata.generation }}}}}}'\n      record: {{condition: Notified}}\n"
            ),
        )
    })
}

/// A templates directory: the shipped templates plus `extra` (relative path, text).
pub fn templates_with(extra: &[(&str, &str)]) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).expect("mkdir");
        for entry in std::fs::read_dir(from).expect("read dir").flatten() {
            let target = to.join(entry.file_name());
            if entry.path().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).expect("copy");
            }
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    copy(&templates(), dir.path());
    for (path, text) in extra {
        let path = dir.path().join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write template");
    }
    dir
}

/// The seed of a test's random timings: `RULEOP_TEST_SEED` when set (to replay a failure), else
/// the clock's nanoseconds. Printed, so that a failing run says how to replay it.
pub fn test_seed(test: &str) -> u64 {
    let seed = std::env::var("RULEOP_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| random_below(u64::from(u32::MAX)));
    eprintln!("{test}: RULEOP_TEST_SEED={seed}");
    seed
}

/// The `round`-th value below `limit` of the sequence `seed` starts (splitmix64).
pub fn seeded_below(seed: u64, round: u64, limit: u64) -> u64 {
    let mut z = seed.wrapping_add(round.wrapping_add(1).wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) % limit
}

/// Poor man's randomness for kill timings: the clock's nanoseconds.
pub fn random_below(limit: u64) -> u64 {
    u64::from(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos()),
    ) % limit
}

/// `(name, deletionTimestamp)` of every Namespace whose name starts with `prefix`.
pub fn namespaces_named(prefix: &str) -> Vec<(String, String)> {
    kubectl_ok(&[
        "get",
        "namespaces",
        "-o",
        "jsonpath={range .items[*]}{.metadata.name} {.metadata.deletionTimestamp}{\"\\n\"}{end}",
    ])
    .lines()
    .filter(|l| l.starts_with(prefix))
    .map(|l| {
        let (name, deleting) = l.split_once(' ').unwrap_or((l, ""));
        (name.to_owned(), deleting.trim().to_owned())
    })
    .collect()
}

/// Whether an object carries ruleop's cleanup finalizer.
pub fn has_cleanup_finalizer(namespace: &str, what: &str) -> bool {
    get(namespace, what, "{.metadata.finalizers}").contains("ruleop.io/cleanup")
}

/// The shipped templates directory.
pub fn templates() -> PathBuf {
    root().join("templates")
}

/// A Database manifest.
pub fn database(name: &str, replicas: u32, extra_spec: &str) -> String {
    // Its credentials Secret first (the Database stays the last document, so `extra_spec` lands in
    // its spec): without it the shipped rule says Ready=False, SecretNotFound.
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-credentials}}\nstringData: {{password: test-password}}\n---\n\
         apiVersion: myorg.io/v1\nkind: Database\nmetadata:\n  name: {name}\nspec:\n  version: \"16\"\n  replicas: {replicas}\n  storage:\n    size: 1Gi\n{extra_spec}"
    )
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
        let mut key = format!("{verb} {resource}");
        if !label("group").is_empty() {
            key = format!("{key}.{}", label("group"));
        }
        if !label("subresource").is_empty() {
            key = format!("{key}/{}", label("subresource"));
        }
        if !code.starts_with('2') {
            key = format!("{key} {code}");
        }
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
