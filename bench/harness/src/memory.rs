//! The operator's memory over N converged Databases (issue 13): RSS empty, steady after
//! convergence, and after a restart that lists everything; bytes per cached object. A
//! measurement, not a test (`make measure-memory`; it starts a control plane as the tests do,
//! or uses the one `KUBECONFIG` names):
//!
//! ```sh
//! MIMALLOC_ALLOW_THP=0 MIMALLOC_PURGE_DELAY=0 MEMORY_N=1000 bench/tool.sh memory
//! ```
//!
//! (bench/tool.sh builds the release binary it runs; `RULEOP_BIN` names another)
//!
//! (the two allocator settings are the chart's Deployment's, deploy/helm/ruleop/templates/deployment.yaml; the operator inherits them)

use std::time::{Duration, Instant};

use ruleop_testkit::*;

/// Whole-process memory figures from /proc, in KiB.
fn proc_status(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or(0)
}

fn count(ns: &str, kind: &str) -> usize {
    kubectl_ok(&["get", kind, "-n", ns, "-o", "name"]).lines().count()
}

/// Waits until no reconcile has finished for `quiet` (actions requeue their parent after 1 s).
fn settle(operator: &Operator, quiet: Duration) -> u64 {
    let mut last = operator.reconciles("database");
    let mut changed = Instant::now();
    wait_until(Duration::from_secs(600), "the operator to settle", || {
        let now = operator.reconciles("database");
        if now != last {
            (last, changed) = (now, Instant::now());
        }
        changed.elapsed() >= quiet
    });
    last
}

pub(crate) fn main() {
    memory_over_n_converged_databases();
}

fn memory_over_n_converged_databases() {
    let n: usize = std::env::var("MEMORY_N")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(1000);
    install_crds();
    let ns = Namespace::new("memory");
    let rules = root().join("rules");
    let operator = Operator::start(&rules, &templates(), &ns.0);
    std::thread::sleep(Duration::from_secs(2));
    let empty = proc_status(operator.pid(), "VmRSS");

    let manifests: String = (0..n)
        .map(|i| database(&format!("db-{i:05}"), 1, "  backup:\n    enabled: true\n") + "\n---\n")
        .collect();
    let start = Instant::now();
    for chunk in manifests.split_inclusive("---\n").collect::<Vec<_>>().chunks(500) {
        let out = kubectl_with_stdin(&["create", "-n", &ns.0, "-f", "-"], Some(&chunk.concat()));
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    }
    wait_until(Duration::from_secs(900), "N services, statefulsets and jobs", || {
        count(&ns.0, "services") == n && count(&ns.0, "statefulsets") == n && count(&ns.0, "jobs") == n
    });
    let converged = start.elapsed();
    settle(&operator, Duration::from_secs(3));
    let steady = proc_status(operator.pid(), "VmRSS");
    let peak = proc_status(operator.pid(), "VmHWM");
    let metrics = operator.get("/metrics").unwrap_or_default();
    assert!(operator.stop(), "ruleop stopped cleanly");

    let restarted = Operator::start(&rules, &templates(), &ns.0);
    let started = Instant::now();
    wait_until(Duration::from_secs(600), "N reconciles after the restart", || {
        restarted.reconciles("database") >= n as u64
    });
    let all_reconciled = started.elapsed();
    settle(&restarted, Duration::from_secs(3));
    let after_restart = proc_status(restarted.pid(), "VmRSS");
    let restart_peak = proc_status(restarted.pid(), "VmHWM");
    let writes = restarted.writes();
    drop(restarted);

    let mb = |kb: u64| kb as f64 / 1024.0;
    // What the operator caches, by its own count (parents, children, looked-up objects).
    let cached = sum_metric(&metrics, "ruleop_cached_objects", &[]);
    let per_object = (steady.saturating_sub(empty) * 1024) as f64 / cached.max(1) as f64;
    println!("memory, N = {n} (binary {})", binary().display());
    println!("  converged in {converged:.1?}; restart: all reconciled in {all_reconciled:.1?}, {writes} writes");
    println!(
        "  RSS empty {:.1} MB, steady {:.1} MB (peak {:.1} MB)",
        mb(empty),
        mb(steady),
        mb(peak)
    );
    println!(
        "  RSS after restart {:.1} MB (peak {:.1} MB) = {:.2}x steady",
        mb(after_restart),
        mb(restart_peak),
        after_restart as f64 / steady as f64
    );
    println!("  bytes per cached object ({cached} cached, by ruleop_cached_objects): {per_object:.0}");
    for line in metrics.lines().filter(|l| l.starts_with("ruleop_cached_objects")) {
        println!("  {line}");
    }
    // The final-backup finalizers would hold the namespace's deletion: no operator runs now.
    let clear = format!(
        "kubectl get databases -n {0} -o name | xargs -P 8 -I{{}} kubectl patch -n {0} {{}} --type=merge -p '{{\"metadata\":{{\"finalizers\":null}}}}' >/dev/null",
        ns.0
    );
    let cleared = std::process::Command::new("sh")
        .args(["-c", &clear])
        .env("KUBECONFIG", &control_plane().kubeconfig)
        .status();
    assert!(cleared.is_ok_and(|s| s.success()), "finalizers removed");
    assert_eq!(writes, 0, "a restart over converged parents writes nothing");
}
