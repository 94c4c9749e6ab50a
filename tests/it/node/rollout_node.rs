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

/// The smallest first-step percent that moves some of the Databases of `ns` and not all, by
/// the engine's order of every Database of the cluster.
fn first_step_moving_some_of(ns: &str) -> u8 {
    let listed = kubectl_ok(&[
        "get",
        "databases",
        "-A",
        "-o",
        r#"jsonpath={range .items[*]}{.metadata.uid} {.metadata.namespace}{"\n"}{end}"#,
    ]);
    let parents: Vec<(&str, &str)> = listed.lines().filter_map(|l| l.split_once(' ')).collect();
    let mine: Vec<&str> = parents.iter().filter(|(_, n)| *n == ns).map(|(uid, _)| *uid).collect();
    (1..100)
        .find(|&percent| {
            let moved = ruleop::engine::rollout::order::moved(parents.iter().map(|(uid, _)| *uid), percent);
            let of_mine = mine.iter().filter(|uid| moved.contains(*uid)).count();
            of_mine > 0 && of_mine < mine.len()
        })
        .unwrap_or_else(|| panic!("no percent moves some of {mine:?} among {parents:?}"))
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
    for name in NAMES {
        create_database(&ns.0, name, 1, false);
    }
    wait_until(Duration::from_secs(300), "3 Databases Ready", || {
        NAMES.iter().all(|name| ready(&ns.0, name))
    });
    // A step's share is of the rule's parents cluster-wide, other tests' Databases (some still
    // being deleted) included: the first step's percent is chosen, by the engine's own order,
    // so that it moves some of these three and not all.
    let percent = first_step_moving_some_of(&ns.0);
    // First the policy (a long pause, no failure allowed), on its own, so the template edit
    // after it is staged whichever ConfigMap volume the kubelet refreshes first.
    ruleop.edit("repo/rules/database.yaml", |text| {
        format!("{text}  rollout:\n    steps:\n      - {{percent: {percent}, pause: 10m}}\n      - {{percent: 100}}\n    maxFailures: 0\n")
    });
    ruleop.apply();
    wait_until(Duration::from_secs(120), "the rule with its rollout in force", || {
        node::status("rollout\\.database").contains("phase: Progressing")
    });
    let before = statefulsets(&ns.0);
    let old_image = before.values().next().expect("a StatefulSet").0.clone();
    // An image on a registry at a loopback port nothing listens on: containerd's pull is refused
    // on this machine (nothing is sent elsewhere), which is an ImagePull failure like a missing tag.
    ruleop.edit("repo/templates/database/statefulset.yaml.j2", |text| {
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
    assert!(
        !moved.is_empty() && moved.len() < NAMES.len(),
        "some of the three moved, not all: {after:?}"
    );
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
        state.contains(": Ready False"),
        "the halt names a failed Database: {state}"
    );
    let halts = events("ruleop-system", "reason=RolloutHalted", "{.items[*].metadata.name}");
    assert!(!halts.is_empty(), "a RolloutHalted Event");
    // The two unmoved Databases: their StatefulSets untouched and Ready, for a while after.
    let held = Instant::now();
    wait_until(Duration::from_secs(60), "30 s past the halt", || {
        let now = statefulsets(&ns.0);
        for name in NAMES.iter().filter(|n| after[**n].0 == old_image) {
            assert_eq!(now.get(*name), before.get(*name), "{name} is never written");
            assert!(ready(&ns.0, name), "{name} stays Ready");
        }
        held.elapsed() > Duration::from_secs(30)
    });
    eprintln!("template edit applied -> halted at the first step in {halted} ms; moved {moved} ({reasons}):\n{state}");
}
