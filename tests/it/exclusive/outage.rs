//! An API server outage mid-convergence: ruleop reconnects by itself, loses nothing and
//! duplicates nothing, and reports not-ready (`/readyz` 503) while the API server is gone and
//! ready again once its watches are back.
//!
//! This binary owns a restartable control plane (`--data-dir`: the same port, CA, tokens and etcd
//! data after the restart), so stopping it disturbs no other test.

use std::time::{Duration, Instant};

use crate::support::fleet::jobs_per_parent;
use crate::support::*;

const PARENTS: usize = 30;
const OUTAGE: Duration = Duration::from_secs(20);

/// Parents whose backup ran and whose status caught up with their generation.
fn converged(ns: &str) -> usize {
    get(
        ns,
        "databases",
        "{range .items[*]}{.metadata.generation}/{.status.observedGeneration}/{.status.actions.backup.phase}{\"\\n\"}{end}",
    )
    .lines()
    .filter(|line| {
        matches!(line.split('/').collect::<Vec<_>>()[..],
            [generation, observed, "Done"] if !generation.is_empty() && generation == observed)
    })
    .count()
}

#[test]
fn an_api_server_outage_mid_convergence_is_survived_with_one_backup_per_parent() {
    let plane = restartable_control_plane();
    install_crds();
    let ns = Namespace::new("outage");
    // One reconcile at a time, so that convergence is still under way when the API server stops.
    let rules = rules_dir(|text| text.replace("maxConcurrentReconciles: 5", "maxConcurrentReconciles: 1"));
    let mut operator = Operator::start(rules.path(), &templates(), &ns.0);

    let manifests: String = (0..PARENTS)
        .map(|i| {
            format!(
                "---\n{}",
                database(&format!("db{i:02}"), 1, "  backup:\n    enabled: true\n")
            )
        })
        .collect();
    let t0 = Instant::now();
    apply_yaml(&ns.0, &manifests);
    wait_until(Duration::from_secs(60), "the first backup Job", || {
        !jobs_per_parent(&ns.0).is_empty()
    });
    let jobs_before = jobs_per_parent(&ns.0).values().sum::<usize>();
    let converged_before = converged(&ns.0);

    let outage_start = t0.elapsed();
    let stop_took = plane.stop();
    let not_ready_after = wait_until(Duration::from_secs(15), "/readyz to fail during the outage", || {
        operator.get_status("/readyz").is_some_and(|(code, _)| code == 503)
    });
    std::thread::sleep(OUTAGE.saturating_sub(stop_took + not_ready_after));
    let readyz_at_end = operator.get_status("/readyz");
    assert!(
        readyz_at_end.as_ref().is_some_and(|(code, _)| *code == 503),
        "/readyz fails for the whole outage: {readyz_at_end:?}"
    );
    let start_took = plane.start();
    let outage_end = t0.elapsed();

    let reconverged = wait_until(Duration::from_secs(120), "every parent to converge", || {
        converged(&ns.0) == PARENTS
    });
    let ready_again = wait_until(Duration::from_secs(60), "/readyz to pass again", || operator.ready());
    assert!(operator.is_running(), "ruleop was not restarted");

    let jobs = jobs_per_parent(&ns.0);
    eprintln!(
        "outage: {PARENTS} parents applied at 0 s; {jobs_before} Jobs and {converged_before} parents \
         converged when the API server got SIGTERM at {:.1} s (exit took {:.2} s); ruleop's /readyz \
         failed {:.2} s after the exit ({}); API server started again {:.1} s after the SIGTERM, \
         READY {:.2} s later (unreachable {:.1} s in all); every parent converged {:.2} s after \
         READY, /readyz ok {:.2} s after that; {} Jobs",
        outage_start.as_secs_f64(),
        stop_took.as_secs_f64(),
        not_ready_after.as_secs_f64(),
        readyz_at_end.map_or_else(String::new, |(code, body)| {
            format!("{code} {}", body.lines().next().unwrap_or_default())
        }),
        OUTAGE.max(stop_took + not_ready_after).as_secs_f64(),
        start_took.as_secs_f64(),
        (outage_end - outage_start).as_secs_f64(),
        reconverged.as_secs_f64(),
        ready_again.as_secs_f64(),
        jobs.values().sum::<usize>(),
    );
    assert!(
        converged_before < PARENTS,
        "the outage began mid-convergence ({converged_before} of {PARENTS} parents had converged)"
    );
    assert_eq!(jobs.len(), PARENTS, "every parent has its backup: {jobs:?}");
    assert!(jobs.values().all(|n| *n == 1), "exactly one Job per parent: {jobs:?}");
}

/// Sends `signal` (`STOP`, `CONT`) to a process.
fn signal(pid: u32, signal: &str) {
    let status = std::process::Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .expect("kill runs");
    assert!(status.success(), "kill -{signal} {pid}");
}

// A change ruleop's watches missed (it was frozen while the API server restarted, so they come
// back to a watch cache that has forgotten their resourceVersion: 410, a relist) is reconciled
// once the relist is in, not lost until the resync. Before `cache/relist.rs` the relist's
// reconciles read the caches from before it, found nothing to do, and spent their trigger.
#[test]
fn a_change_made_while_ruleop_could_not_watch_is_reconciled_after_the_relist() {
    const MANY: usize = 1000;
    let plane = restartable_control_plane();
    let kind = crate::support::custom::CustomKind::new("relist", "Relisted");
    kind.install();
    let ns = Namespace::new("relist");
    let (rules, templates) = kind.config_map_rule("relisted");
    let operator = Operator::start(rules.path(), templates.path(), &ns.0);
    // "a-first" is listed first, so its reconcile starts while the rest of the relist streams in.
    let objects: String = std::iter::once("a-first".to_owned())
        .chain((0..MANY).map(|i| format!("p{i:03}")))
        .map(|name| format!("---\n{}\n", kind.object(&name, r#"{"size": "before"}"#)))
        .collect();
    apply_yaml(&ns.0, &objects);
    let size = || get(&ns.0, "configmap/a-first-cm", "{.data.size}");
    wait_until(Duration::from_secs(120), "every child", || {
        get(&ns.0, &format!("configmap/p{:03}-cm", MANY - 1), "{.data.size}") == "before" && size() == "before"
    });
    operator.idle_reconciles("relisted");

    // Frozen, and its connections cut by a restart, so that no byte of the change can wait in
    // a socket for it: the change is made with ruleop holding no connection at all.
    signal(operator.pid(), "STOP");
    plane.stop();
    plane.start();
    kubectl_ok(&[
        "patch",
        "-n",
        &ns.0,
        &format!("{}/a-first", kind.resource()),
        "--type=merge",
        "-p",
        r#"{"spec":{"size":"after"}}"#,
    ]);
    // The revision ruleop last saw is compacted away and the API server's watch cache starts
    // afresh: its watches must relist.
    let etcd = crate::support::etcd::etcd_client_url(plane).expect("the plane's etcd");
    crate::support::etcd::compact_etcd(&etcd).expect("etcd compacts");
    plane.stop();
    plane.start();
    signal(operator.pid(), "CONT");
    let started = Instant::now();
    wait_until(
        Duration::from_secs(60),
        "the missed change applied after the relist",
        || size() == "after",
    );
    eprintln!(
        "the missed change reached the child {:?} after ruleop resumed",
        started.elapsed()
    );
    kind.uninstall();
}

// After an outage every watch of a controller fails over and over (refused connections while the
// API server is down, then 410 Gone for the versions its new watch cache no longer holds).
// kube-runtime's Controller backs off its whole trigger stream on each watch error it is handed
// (0.8 s doubling to about 30 s, forgotten only after two quiet minutes), and while it waits it
// polls none of its watches: parent and child events alike. When ruleop handed the watches'
// errors on, a change made once ruleop was ready again waited out that backoff (in the chaos
// soak a replica reconciled nothing for the rest of its run). The watches back off on their own
// and the controller gets their objects only; a watch relists at once on a 410, and wakes from
// its backoff when its probe finds the API server answering (`cache/retry.rs`): without those,
// the Database watch slept out the outage's backoff after its 410 (23.8 s in one run).
#[test]
fn a_change_made_after_an_outage_is_reconciled_without_waiting_out_a_backoff() {
    /// Long enough for every watch to fail several times over.
    const DOWN: Duration = Duration::from_secs(8);
    /// What a reconcile of a one-parent namespace takes with every watch back, with room to spare.
    const PROMPT: Duration = Duration::from_secs(8);
    let plane = restartable_control_plane();
    install_crds();
    let ns = Namespace::new("after-outage");
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("db", 1, ""));
    let observed = || get(&ns.0, "database/db", "{.status.observedGeneration}");
    wait_until(Duration::from_secs(60), "the Database reconciled", || observed() == "1");

    plane.stop();
    wait_until(Duration::from_secs(15), "/readyz to fail during the outage", || {
        operator.get_status("/readyz").is_some_and(|(code, _)| code == 503)
    });
    std::thread::sleep(DOWN);
    plane.start();
    wait_until(Duration::from_secs(60), "/readyz to pass again", || operator.ready());

    kubectl_ok(&[
        "patch",
        "-n",
        &ns.0,
        "database/db",
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":2}}"#,
    ]);
    let took = wait_until(Duration::from_secs(120), "the change reconciled", || observed() == "2");
    eprintln!(
        "a change made once ruleop was ready again was reconciled in {:.2} s",
        took.as_secs_f64()
    );
    assert!(
        took < PROMPT,
        "a change made after the outage waited {took:?} (bound {PROMPT:?}): the controller was backing off"
    );
}
