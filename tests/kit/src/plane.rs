//! The control planes tests run against: the shared one, a restartable one, the node's; which
//! one a test uses, and what they report about themselves.

use std::cell::Cell;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::*;

/// A running (or reused) control plane.
pub struct ControlPlane {
    /// Admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// The process when these tests started it (`None` while stopped or when reused).
    process: Mutex<Option<(Child, ChildStdin)>>,
    /// The data directory of a restartable plane (see [`restartable_control_plane`]).
    data_dir: Option<tempfile::TempDir>,
    /// Set once the shipped CRDs are installed and served here ([`install_crds`]).
    crds: OnceLock<()>,
}

static SHARED: OnceLock<ControlPlane> = OnceLock::new();
static NODE: OnceLock<ControlPlane> = OnceLock::new();

thread_local! {
    /// The control plane this test's thread switched to, if any (libtest runs each test on a
    /// thread of its own).
    static SWITCHED: Cell<Option<&'static ControlPlane>> = const { Cell::new(None) };
}

/// The control plane of the calling test: the one its thread switched to
/// ([`restartable_control_plane`], [`node_control_plane`]), else the shared one, started on
/// first use. Every helper (kubectl, [`Operator`], ...) goes through this.
pub fn control_plane() -> &'static ControlPlane {
    SWITCHED.with(Cell::get).unwrap_or_else(|| {
        SHARED.get_or_init(|| {
            if let Ok(path) = std::env::var("KUBECONFIG")
                && !path.is_empty()
            {
                return ControlPlane::new(PathBuf::from(path), None, None);
            }
            let (child, stdin, kubeconfig) = start_apiserver(&[]);
            ControlPlane::new(kubeconfig, Some((child, stdin)), None)
        })
    })
}

/// Switches the calling test to a control plane of its own with a data directory, even when
/// `KUBECONFIG` names a shared one, so it can stop and start it (an API server outage), or install
/// cluster-wide objects, without disturbing other tests. Call it before any other helper. Each
/// call starts one, which runs until the tests end.
pub fn restartable_control_plane() -> &'static ControlPlane {
    let dir = tempfile::tempdir().expect("data dir");
    let (child, stdin, kubeconfig) = start_apiserver(&["--data-dir", &dir.path().display().to_string()]);
    let plane: &'static ControlPlane =
        Box::leak(Box::new(ControlPlane::new(kubeconfig, Some((child, stdin)), Some(dir))));
    SWITCHED.with(|switched| switched.set(Some(plane)));
    plane
}

/// Switches the calling test to the control plane with a node (tests/node, see [`node`]):
/// reused from `RULEOP_NODE_KUBECONFIG` (`make test` starts it), or started once with
/// `ctl.sh start --node` and stopped after this process exits. Call it before any other helper.
pub fn node_control_plane() -> &'static ControlPlane {
    let plane = NODE.get_or_init(node::control_plane);
    SWITCHED.with(|switched| switched.set(Some(plane)));
    plane
}

impl ControlPlane {
    /// One at `kubeconfig`: `process` when these tests started it (it exits when its stdin
    /// closes), `data_dir` when it is restartable.
    pub(super) fn new(
        kubeconfig: PathBuf,
        process: Option<(Child, ChildStdin)>,
        data_dir: Option<tempfile::TempDir>,
    ) -> Self {
        ControlPlane {
            kubeconfig,
            process: Mutex::new(process),
            data_dir,
            crds: OnceLock::new(),
        }
    }

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

/// Installs the shipped CRDs (idempotent) and waits until they are served.
pub fn install_crds() {
    control_plane().crds.get_or_init(|| {
        kubectl_ok(&["apply", "-f", &root().join("deploy/crds").display().to_string()]);
        kubectl_ok(&["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"]);
    });
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
