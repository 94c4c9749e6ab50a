//! A staged rollout on the node: a template edit naming an image that is not there (a real
//! ImagePull failure, `imagePullPolicy: IfNotPresent`) makes the moved Database's Postgres pod
//! fail, the Database stops being Ready, and the rollout halts after its first step with the
//! other Databases never written.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::node::{self, create_database, ms};
use crate::support::{Namespace, events, get, kubectl_ok, wait_until};

const NAMES: [&str; 3] = ["red", "green", "blue"];

/// `name -> (image, resourceVersion)` of the Databases' StatefulSets in `ns`.
fn statefulsets(ns: &str) -> BTreeMap<String, (String, String)> {
    let out = kubectl_ok(&[
        "-n",
        ns,
        "get",
        "statefulsets",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.name} {.spec.template.spec.containers[0].image} {.metadata.resourceVersion}{"\n"}{end}"#,
    ]);
    out.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let name = fields.next()?.to_owned();
            Some((name, (fields.next()?.to_owned(), fields.next()?.to_owned())))
        })
        .collect()
}

fn ready(ns: &str, name: &str) -> bool {
    get(
        ns,
        &format!("database/{name}"),
        r#"{.status.conditions[?(@.type=="Ready")].status}"#,
    ) == "True"
}

/// The waiting reasons of the containers of `name`'s pods.
fn waiting_reasons(ns: &str, name: &str) -> String {
    kubectl_ok(&[
        "-n",
        ns,
        "get",
        "pods",
        "-l",
        &format!("app={name}"),
        "-o",
        "jsonpath={.items[*].status.containerStatuses[*].state.waiting.reason}",
    ])
}

#[test]
fn an_image_that_cannot_be_pulled_halts_the_rollout_after_its_first_step() {
    let ruleop = node::ruleop();
    let ruleop = ruleop.as_ref().expect("installed");
    let ns = Namespace::new("node-rollout");
    // A step's share is of the rule's parents cluster-wide: another test's Databases (still
    // being deleted, with their final backup) would count too.
    wait_until(Duration::from_secs(300), "no other test's Database left", || {
        kubectl_ok(&["get", "databases", "-A", "-o", "name"]).trim().is_empty()
    });
    for name in NAMES {
        create_database(&ns.0, name, 1, false);
    }
    wait_until(Duration::from_secs(300), "3 Databases Ready", || {
        NAMES.iter().all(|name| ready(&ns.0, name))
    });
    // First the policy (one of three parents, a long pause, no failure allowed), on its own, so
    // the template edit after it is staged whichever ConfigMap volume the kubelet refreshes first.
    ruleop.edit("deploy/config/rules/database.yaml", |text| {
        format!("{text}  rollout:\n    steps:\n      - {{percent: 30, pause: 10m}}\n      - {{percent: 100}}\n    maxFailures: 0\n")
    });
    ruleop.apply();
    wait_until(Duration::from_secs(120), "the rule with its rollout in force", || {
        node::status("rollout\\.database").contains("phase: Progressing")
    });
    let before = statefulsets(&ns.0);
    let old_image = before.values().next().expect("a StatefulSet").0.clone();
    // An image on a registry at a loopback port nothing listens on: containerd's pull is refused
    // on this machine (nothing is sent elsewhere), which is an ImagePull failure like a missing tag.
    ruleop.edit("deploy/config/templates/database/statefulset.yaml.j2", |text| {
        text.replacen(
            "image: postgres:{{ spec.version }}",
            "image: 127.0.0.1:1/ruleop-missing/postgres:{{ spec.version }}\n          imagePullPolicy: IfNotPresent",
            1,
        )
    });
    let edited = Instant::now();
    ruleop.apply();
    wait_until(Duration::from_secs(240), "the rollout to halt", || {
        node::status("rollout\\.database").contains("phase: Halted")
    });
    let halted = ms(edited);
    let after = statefulsets(&ns.0);
    let moved: Vec<&String> = after
        .iter()
        .filter(|(_, (image, _))| *image != old_image)
        .map(|(name, _)| name)
        .collect();
    assert_eq!(moved.len(), 1, "one of three moved: {after:?}");
    let moved = moved[0].clone();
    // The halt may come as the old pod stops, before the kubelet has tried the pull.
    wait_until(
        Duration::from_secs(120),
        "the moved Database's pod failing its pull",
        || {
            let reasons = waiting_reasons(&ns.0, &moved);
            reasons.contains("ErrImagePull") || reasons.contains("ImagePullBackOff")
        },
    );
    let reasons = waiting_reasons(&ns.0, &moved);
    let state = node::status("rollout\\.database");
    assert!(
        state.contains(&format!("{}/{moved}: Ready False", ns.0)),
        "the halt names the failed Database: {state}"
    );
    let halts = events("ruleop-system", "reason=RolloutHalted", "{.items[*].metadata.name}");
    assert!(!halts.is_empty(), "a RolloutHalted Event");
    // The two unmoved Databases: their StatefulSets untouched and Ready, for a while after.
    let held = Instant::now();
    wait_until(Duration::from_secs(60), "30 s past the halt", || {
        let now = statefulsets(&ns.0);
        for name in NAMES.iter().filter(|n| **n != moved) {
            assert_eq!(now.get(*name), before.get(*name), "{name} is never written");
            assert!(ready(&ns.0, name), "{name} stays Ready");
        }
        held.elapsed() > Duration::from_secs(30)
    });
    eprintln!("template edit applied -> halted at the first step in {halted} ms; moved {moved} ({reasons}):\n{state}");
}
