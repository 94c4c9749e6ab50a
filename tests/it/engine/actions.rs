//! Guarded one-shot actions against the real control plane: once per generation, once per
//! annotation value, crash-safe under SIGKILL, safe with two operators, webhooks retried.

use std::time::{Duration, Instant};

use crate::support::fleet::jobs_per_parent;
use crate::support::webhook::{Trap, Webhook};
use crate::support::*;

const WAIT: Duration = Duration::from_secs(60);

fn backup(name: &str) -> String {
    database(name, 1, "  backup:\n    enabled: true\n")
}

#[test]
fn each_spec_change_runs_the_backup_once_and_a_status_change_does_not() {
    install_crds();
    let ns = Namespace::new("act-gen");
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &backup("orders"));
    wait_until(WAIT, "the first backup", || {
        jobs_per_parent(&ns.0).get("orders") == Some(&1)
    });
    for (replicas, expected) in [(2, 2), (3, 3)] {
        merge_patch(
            &ns.0,
            "database/orders",
            &format!(r#"{{"spec":{{"replicas":{replicas}}}}}"#),
        );
        wait_until(WAIT, "one more backup", || {
            jobs_per_parent(&ns.0).get("orders") == Some(&expected)
        });
    }
    wait_until(WAIT, "the record", || {
        get(&ns.0, "database/orders", "{.status.actions.backup.guardValue}") == "generation=3"
    });
    operator.reconciled_after("database", || {
        merge_patch_status(&ns.0, "database/orders", r#"{"status":{"endpoint":"changed"}}"#);
    });
    assert_eq!(
        jobs_per_parent(&ns.0).get("orders"),
        Some(&3),
        "a status change starts no backup"
    );
    assert_eq!(
        get(
            &ns.0,
            "database/orders",
            "{.status.conditions[?(@.type==\"BackupInitiated\")].status}"
        ),
        "True"
    );
    // This control plane runs no Job controller: the latest Job is reported as running, and no
    // backup time is claimed before a Job succeeded.
    wait_until(WAIT, "the latest backup Job in status", || {
        get(&ns.0, "database/orders", "{.status.lastBackupResult}") == "Running"
    });
    let latest = get(&ns.0, "database/orders", "{.status.lastBackupJob}");
    let key = get(&ns.0, "database/orders", "{.status.actions.backup.key}");
    assert!(
        latest.starts_with("orders-backup-") && latest.ends_with(&key[..10]),
        "the latest run's Job ({latest}, key {key})"
    );
    assert_eq!(get(&ns.0, "database/orders", "{.status.lastBackupTime}"), "");
}

#[test]
fn the_backup_request_annotation_runs_once_per_distinct_value() {
    install_crds();
    let ns = Namespace::new("act-ann");
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(WAIT, "convergence", || {
        get(&ns.0, "database/orders", "{.status.observedGeneration}") == "1"
    });
    assert!(jobs_per_parent(&ns.0).is_empty(), "no request, no backup");
    for (value, expected) in [("2026-11-29T10:00:00Z", 1), ("2026-11-29T11:00:00Z", 2)] {
        kubectl_ok(&[
            "annotate",
            "--overwrite",
            "-n",
            &ns.0,
            "database/orders",
            &format!("myorg.io/backup-request={value}"),
        ]);
        wait_until(WAIT, "the requested backup", || {
            jobs_per_parent(&ns.0).get("orders") == Some(&expected)
        });
    }
    operator.reconciled_after("database", || {
        kubectl_ok(&[
            "annotate",
            "--overwrite",
            "-n",
            &ns.0,
            "database/orders",
            "myorg.io/backup-request=2026-11-29T11:00:00Z",
        ]);
        kubectl_ok(&["label", "--overwrite", "-n", &ns.0, "database/orders", "touched=yes"]);
    });
    assert_eq!(
        jobs_per_parent(&ns.0).get("orders"),
        Some(&2),
        "the same value does not run again"
    );
}

#[test]
fn a_webhook_failing_twice_is_retried_under_one_key_and_takes_effect_once() {
    install_crds();
    let ns = Namespace::new("act-hook");
    let hook = Webhook::start(2);
    let rules = rules_with_webhook(&hook.url);
    let _operator = Operator::start(rules.path(), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    let condition = |field: &str| {
        get(
            &ns.0,
            "database/orders",
            &format!("{{.status.conditions[?(@.type==\"ActionsSucceeded\")].{field}}}"),
        )
    };
    // Phase, condition status and message from one read: the retry may succeed between reads.
    let mut failed = String::new();
    wait_until(WAIT, "the first failure in status", || {
        failed = get(
            &ns.0,
            "database/orders",
            "{.status.actions.notify.phase}|{.status.conditions[?(@.type==\"ActionsSucceeded\")].status}|{.status.conditions[?(@.type==\"ActionsSucceeded\")].message}",
        );
        failed.starts_with("Failed|")
    });
    assert!(
        failed.starts_with("Failed|False|")
            && failed.contains("failed for generation=1")
            && failed.contains("answered 500"),
        "{failed}"
    );
    wait_until(WAIT, "the notify run to complete", || {
        get(&ns.0, "database/orders", "{.status.actions.notify.phase}") == "Done"
    });
    let (keys, deliveries, effects) = hook.counts();
    assert_eq!(
        (keys, deliveries, effects),
        (1, 3, 1),
        "one key, delivered three times, one effect"
    );
    assert_eq!(get(&ns.0, "database/orders", "{.status.actions.notify.attempts}"), "3");
    assert!(
        condition("message").contains("succeeded for generation=1 on attempt 3"),
        "{}",
        condition("message")
    );
    assert_eq!(condition("status"), "True");
    assert_eq!(
        get(
            &ns.0,
            "database/orders",
            "{.status.conditions[?(@.type==\"Notified\")].status}"
        ),
        "True"
    );
    let events = kubectl_ok(&["get", "events", "-n", &ns.0, "-o", "jsonpath={.items[*].reason}"]);
    assert!(
        events.contains("ActionFailed") && events.contains("ActionRan"),
        "events: {events}"
    );
}

#[test]
fn a_slow_webhook_holds_no_worker_and_its_secret_header_reaches_only_the_request() {
    install_crds();
    let ns = Namespace::new("act-slow");
    let hook = Webhook::holding();
    let origin = hook.url.trim_end_matches("/hook").to_owned();
    // One worker: before requests were handed to tasks of their own, the second Database's
    // reconcile waited for the first one's request (up to its 30 s timeout).
    let rules = rules_dir(|text| {
        if !text.contains("name: database") {
            return text.to_owned();
        }
        text.replace("maxConcurrentReconciles: 5", "maxConcurrentReconciles: 1").replace(
            "  actions:\n",
            &format!(
                "  actions:\n    - id: notify\n      guard: {{generation: true}}\n      http:\n        url: {url}\n        allowedHosts: [{origin:?}]\n        timeout: 30s\n        headers:\n          Authorization: {{valueFrom: {{secretKeyRef: {{name: hook-token, key: token}}}}}}\n",
                url = hook.url
            ),
        )
    });
    kubectl_ok(&[
        "create",
        "secret",
        "generic",
        "hook-token",
        "-n",
        &ns.0,
        "--from-literal=token=Bearer s3cr3t-value",
    ]);
    let operator = Operator::start(rules.path(), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("first", 1, ""));
    wait_until(WAIT, "the first request to be held", || hook.snapshot(|r| r.held) == 1);
    apply_yaml(&ns.0, &database("second", 1, ""));
    // The second Database converges and sends its own request while the first one still waits:
    // well within the first request's 30 s timeout, which ended an inline send's hold on the
    // only worker (the receiver keeps counting a request its sender gave up on).
    let both = Duration::from_secs(20);
    wait_until(both, "both requests held at once", || hook.snapshot(|r| r.held) == 2);
    assert!(exists(&ns.0, "service/second-svc"), "the second Database's Service");
    assert_eq!(
        get(&ns.0, "database/first", "{.status.actions.notify.phase}"),
        "Pending"
    );
    hook.release();
    for name in ["first", "second"] {
        wait_until(WAIT, &format!("{name}'s notify run to be recorded"), || {
            get(&ns.0, &format!("database/{name}"), "{.status.actions.notify.phase}") == "Done"
        });
    }
    assert_eq!(hook.counts(), (2, 2, 2), "one delivery per Database");
    assert_eq!(
        get(&ns.0, "database/first", "{.status.actions.notify.attempts}"),
        "1",
        "an answer recorded by a later reconcile is still the first attempt"
    );
    assert_eq!(
        hook.snapshot(|r| r.authorizations.clone()),
        ["Bearer s3cr3t-value", "Bearer s3cr3t-value"],
        "the header from the Secret"
    );
    let delivered = operator.metric(
        "ruleop_reconcile_triggers_total",
        &[("rule", "database"), ("trigger", "delivered")],
    );
    assert!(delivered >= 2, "each answer queued its parent: {delivered}");
    // Without the Secret nothing is sent: the run fails naming it.
    kubectl_ok(&["delete", "secret", "hook-token", "-n", &ns.0]);
    kubectl_ok(&[
        "patch",
        "database",
        "first",
        "-n",
        &ns.0,
        "--type=merge",
        "-p",
        r#"{"spec":{"replicas":2}}"#,
    ]);
    let mut failed = String::new();
    wait_until(WAIT, "the run without its Secret to fail", || {
        failed = get(
            &ns.0,
            "database/first",
            "{.status.actions.notify.phase}|{.status.actions.notify.guardValue}|{.status.actions.notify.error}",
        );
        failed.starts_with("Failed|generation=2|")
    });
    assert!(
        failed.contains(&format!("Secret {}/hook-token key token not found", ns.0))
            && failed.contains("nothing was sent"),
        "{failed}"
    );
    assert_eq!(hook.counts().1, 2, "a request without its Secret was sent");
    let statuses = kubectl_ok(&["get", "databases", "-n", &ns.0, "-o", "json"]);
    let events = kubectl_ok(&["get", "events", "-n", &ns.0, "-o", "json"]);
    for (what, text) in [
        ("status", &statuses),
        ("events", &events),
        ("log", &operator.log_text()),
    ] {
        assert!(!text.contains("s3cr3t"), "the Secret's value shows in the {what}");
    }
}

#[test]
fn a_refused_http_action_opens_no_socket_and_reports_egress_denied_with_scheme_and_host_only() {
    install_crds();
    let ns = Namespace::new("act-egress");
    let trap = Trap::start();
    let port = trap.port;
    // This machine's name, when it resolves to loopback only (as /etc/hosts usually has it):
    // a listed name whose address is refused.
    let hostname = std::fs::read_to_string("/etc/hostname")
        .map(|h| h.trim().to_ascii_lowercase())
        .ok()
        .filter(|h| !h.is_empty() && h != "localhost")
        .filter(|h| {
            use std::net::ToSocketAddrs;
            (h.as_str(), port)
                .to_socket_addrs()
                .is_ok_and(|mut addrs| addrs.all(|a| a.ip().is_loopback()))
        });
    let mut allowed = vec!["hooks.example.com".to_owned()];
    let mut cases = vec![
        ("direct", format!("http://127.0.0.1:{port}/secret-path?token=abc")),
        (
            "userinfo",
            format!("http://hooks.example.com@127.0.0.1:{port}/secret-path"),
        ),
        ("scheme", format!("https://127.0.0.1:{port}/secret-path")),
    ];
    if let Some(host) = &hostname {
        allowed.push(format!("http://{host}:{port}"));
        cases.push(("resolved", format!("http://{host}:{port}/secret-path")));
    }
    let rules = rules_with_http_action(
        "\"{{ metadata.annotations['example.com/hook'] }}\"",
        &format!("{allowed:?}"),
    );
    let operator = Operator::start_with(
        rules.path(),
        &templates(),
        &ns.0,
        &["--egress-deny-cidr", "10.96.0.0/12,10.244.0.0/16"],
    );
    for (name, url) in &cases {
        let parent = database(name, 1, "").replacen(
            "metadata:\n",
            &format!("metadata:\n  annotations:\n    example.com/hook: {url:?}\n"),
            1,
        );
        apply_yaml(&ns.0, &parent);
    }
    for (name, url) in &cases {
        let what = format!("database/{name}");
        let mut seen = String::new();
        wait_until(WAIT, &format!("the {name} request to be refused"), || {
            seen = get(
                &ns.0,
                &what,
                "{.status.actions.notify.phase}|{.status.conditions[?(@.type==\"ActionsSucceeded\")].reason}|{.status.actions.notify.error}",
            );
            seen.starts_with("Failed|")
        });
        assert!(seen.starts_with("Failed|EgressDenied|"), "{name} ({url}): {seen}");
        assert!(seen.contains("refused"), "{name}: {seen}");
        for secret in ["secret-path", "token", &format!(":{port}")] {
            assert!(!seen.contains(secret), "{name}: {secret:?} echoed in {seen}");
        }
    }
    let events = kubectl_ok(&["get", "events", "-n", &ns.0, "-o", "jsonpath={.items[*].reason}"]);
    assert!(events.contains("EgressDenied"), "events: {events}");
    let messages = kubectl_ok(&["get", "events", "-n", &ns.0, "-o", "jsonpath={.items[*].message}"]);
    assert!(
        !messages.contains("secret-path") && !messages.contains("token"),
        "{messages}"
    );
    assert_eq!(trap.accepted(), 0, "a refused request opened a connection");
    // Retried under backoff, still refused, still no connection.
    wait_until(WAIT, "a second refused attempt", || {
        get(&ns.0, "database/direct", "{.status.actions.notify.attempts}")
            .parse::<u32>()
            .is_ok_and(|n| n >= 2)
    });
    assert_eq!(trap.accepted(), 0, "a retried refused request opened a connection");
    assert!(
        !operator.log_text().contains("secret-path"),
        "the log echoes the url's path"
    );
}

#[test]
fn sigkill_at_random_points_never_duplicates_or_loses_a_backup() {
    let mut timings = RandomTimings::new("sigkill_at_random_points_never_duplicates_or_loses_a_backup");
    install_crds();
    let ns = Namespace::new("act-crash");
    let hook = Webhook::start(0);
    let rules = rules_with_webhook(&hook.url);
    const PARENTS: usize = 50;
    let manifests: String = (0..PARENTS)
        .map(|i| format!("---\n{}", backup(&format!("db{i:02}"))))
        .collect();
    let mut kills = 0;
    let mut crash_rounds = |expected_generation: &str| {
        let start = Instant::now();
        let mut round_kills = 0;
        loop {
            let operator = Operator::start(rules.path(), &templates(), &ns.0);
            let all_done = || {
                let records = get(
                    &ns.0,
                    "databases",
                    "{range .items[*]}{.status.actions.backup.guardValue}/{.status.actions.backup.phase}/{.status.actions.notify.phase}{\"\\n\"}{end}",
                );
                records
                    .lines()
                    .filter(|l| *l == format!("generation={expected_generation}/Done/Done"))
                    .count()
                    == PARENTS
            };
            if round_kills == 3 {
                wait_until(Duration::from_secs(90), "every parent's actions", all_done);
                operator.stop();
                return;
            }
            std::thread::sleep(Duration::from_millis(100 + timings.below(900)));
            operator.kill();
            kills += 1;
            round_kills += 1;
            assert!(start.elapsed() < Duration::from_secs(300), "rounds took too long");
        }
    };
    apply_yaml(&ns.0, &manifests);
    crash_rounds("1");
    apply_yaml(&ns.0, &manifests.replace("replicas: 1", "replicas: 2"));
    crash_rounds("2");

    let jobs = jobs_per_parent(&ns.0);
    assert_eq!(jobs.len(), PARENTS, "every parent has backups: {jobs:?}");
    assert!(
        jobs.values().all(|n| *n == 2),
        "exactly one Job per (parent, generation): {jobs:?}"
    );
    let (keys, deliveries, effects) = hook.counts();
    eprintln!(
        "{kills} SIGKILLs; {} Jobs for {PARENTS} parents x 2 generations; webhook: {keys} keys, {deliveries} deliveries ({} duplicates), {effects} effects",
        jobs.values().sum::<usize>(),
        deliveries - keys
    );
    let repeated: Vec<_> = hook.keys_per_body().into_iter().filter(|(_, n)| *n > 1).collect();
    assert_eq!(
        keys,
        PARENTS * 2,
        "every (parent, generation) key reached the webhook; bodies with several keys: {repeated:?}"
    );
    assert_eq!(effects, PARENTS * 2, "each key took effect once");
}

#[test]
fn two_operators_at_once_never_create_two_jobs_for_one_key() {
    install_crds();
    let ns = Namespace::new("act-two");
    let hook = Webhook::start(0);
    let rules = rules_with_webhook(&hook.url);
    let first = Operator::start(rules.path(), &templates(), &ns.0);
    let second = Operator::start(rules.path(), &templates(), &ns.0);
    let manifests: String = (0..10).map(|i| format!("---\n{}", backup(&format!("db{i}")))).collect();
    apply_yaml(&ns.0, &manifests);
    wait_until(WAIT, "every parent's backup and notify", || {
        let phases = get(
            &ns.0,
            "databases",
            "{range .items[*]}{.status.actions.backup.phase}/{.status.actions.notify.phase}{\"\\n\"}{end}",
        );
        phases.lines().filter(|l| *l == "Done/Done").count() == 10
    });
    let jobs = jobs_per_parent(&ns.0);
    assert!(
        jobs.len() == 10 && jobs.values().all(|n| *n == 1),
        "one Job per parent: {jobs:?}"
    );
    let (keys, deliveries, effects) = hook.counts();
    eprintln!(
        "two operators: webhook {keys} keys, {deliveries} deliveries ({} duplicates), {effects} effects",
        deliveries - keys
    );
    assert_eq!((keys, effects), (10, 10));
    drop((first, second));
}

/// Slot → created object, for the ConfigMaps the `minutely` action made in `ns`.
fn minutely_runs(ns: &str) -> Vec<(String, String)> {
    kubectl_ok(&[
        "get",
        "configmaps",
        "-n",
        ns,
        "-l",
        "ruleop.io/action=minutely",
        "-o",
        "jsonpath={range .items[*]}{.data.slot} {.metadata.name}{\"\\n\"}{end}",
    ])
    .lines()
    .filter_map(|l| l.split_once(' '))
    .map(|(slot, name)| (slot.to_owned(), name.to_owned()))
    .collect()
}

#[test]
fn a_scheduled_action_runs_once_per_slot_across_a_sigkill() {
    install_crds();
    let ns = Namespace::new("act-cron");
    // A real schedule of every minute (no test clock): the test waits for two slots.
    let rules = rules_dir(|text| {
        if !text.contains("name: database") {
            return text.to_owned();
        }
        text.replace(
            "  actions:\n",
            "  actions:\n    - id: minutely\n      guard: {schedule: \"* * * * *\"}\n      create: {apiVersion: v1, kind: ConfigMap, template: extra/minutely.yaml.j2}\n",
        )
    });
    let templates = templates_with(&[(
        "extra/minutely.yaml.j2",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ action.name }}\ndata:\n  slot: {{ action.guardValue | tojson }}\n",
    )]);
    let slots = Duration::from_secs(150);
    let operator = Operator::start(rules.path(), templates.path(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, ""));
    wait_until(slots, "the first slot's run", || !minutely_runs(&ns.0).is_empty());
    // Killed as soon as it created the object: its completion may not be recorded yet.
    operator.kill();
    let first = minutely_runs(&ns.0);
    let _restarted = Operator::start(rules.path(), templates.path(), &ns.0);
    wait_until(slots, "the next slot's run", || minutely_runs(&ns.0).len() >= 2);
    let record = || get(&ns.0, "database/orders", "{.status.actions.minutely}");
    wait_until(WAIT, "the second run recorded Done", || {
        get(&ns.0, "database/orders", "{.status.actions.minutely.phase}") == "Done"
            && minutely_runs(&ns.0)
                .iter()
                .any(|(slot, _)| record().contains(slot.as_str()))
            && minutely_runs(&ns.0) != first
    });
    eprintln!("record after two slots: {}", record());
    let runs = minutely_runs(&ns.0);
    assert_eq!(runs.len(), 2, "one object per slot: {runs:?}");
    assert!(
        runs.contains(&first[0]),
        "the first slot was not run again: {first:?} {runs:?}"
    );
    let slot = |i: usize| -> jiff::Timestamp { runs[i].0.trim_start_matches("slot=").parse().expect("a slot time") };
    let mut times = [slot(0), slot(1)];
    times.sort();
    assert_eq!(
        times[1].duration_since(times[0]).as_secs(),
        60,
        "consecutive minutes: {runs:?}"
    );
}
