//! The test-kit: what ruleop's integration tests (tests/it, through `tests/it/support`) and its
//! measurement tool (bench/harness) use to run against the real control plane in tests/apiserver.
//!
//! The shared control plane is started once (or reused when `KUBECONFIG` is set, as `make test`
//! does); it exits when this process does (it watches its stdin). A test that needs another one
//! (the node's, or a restartable one) switches its own thread to it first. Each test gets
//! its own namespace and, when it needs one, its own `ruleop run` child process.

pub mod audit;
pub mod console;
pub mod custom;
pub mod etcd;
pub mod exposition;
pub mod figures;
pub mod fleet;
pub mod helm;
mod inputs;
mod kubectl;
pub mod metrics;
pub mod mount;
pub mod node;
mod operator;
mod plane;
mod timings;
pub mod webhook;
pub mod writes;

pub use inputs::*;
pub use kubectl::*;
pub use metrics::sum_metric;
pub use operator::*;
pub use plane::*;
pub use timings::RandomTimings;

use std::path::Path;
use std::time::{Duration, Instant};

/// The project root (this crate is tests/kit in it).
pub fn root() -> &'static Path {
    static ROOT: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    ROOT.get_or_init(|| {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../..")
            .canonicalize()
            .expect("the project root")
    })
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

/// The text of a command's output.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}
