//! Unit tests of the trace model: built from a plan of a test rule, live objects and Events.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::engine::plan;
use crate::inspect::trace::testkit::{NOW, applied, parent, plan_of, set, trace_of};

#[test]
fn a_child_whose_dependency_is_not_ready_waits_and_nothing_exists_yet() {
    let trace = trace_of(&parent("web", 3), &[], &BTreeMap::new(), &[]);
    assert!(!trace.ready);
    assert_eq!(trace.parent.identity.generation, 2);
    assert_eq!(trace.parent.observed_generation, Some(1));
    assert!(trace.parent.cleanup_finalizer);
    let ids: Vec<&str> = trace.children.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, ["service", "config", "secret", "off"]);
    let service = &trace.children[0];
    assert!(service.desired && !service.ready);
    assert_eq!(service.not_ready.as_deref(), Some("it does not exist yet"));
    assert_eq!(
        service.ready_when.as_deref(),
        Some(r#"object | dig("spec.clusterIP", "") != """#)
    );
    assert!(!service.objects[0].exists);
    assert_eq!(service.objects[0].drift, None);
    let config = &trace.children[1];
    assert_eq!(config.waiting.as_ref().map(|w| w.on.as_str()), Some("service"));
    assert!(!trace.children[3].desired, "`when` is false");
}

#[test]
fn for_each_items_fold_after_twenty_with_counts_and_drift_is_per_object() {
    let set = set();
    let first = parent("web", 25);
    // Ready service first, so the items are planned.
    let service = applied(&plan_of(&set, &first, &[]));
    let observed = applied(&plan_of(&set, &first, &service));
    let mut observed: Vec<Value> = observed
        .into_iter()
        .filter(|o| o["metadata"]["name"] != "web-i24")
        .collect();
    observed.retain(|o| o["kind"] != "Secret");
    let mut drift = BTreeMap::new();
    for o in &observed {
        let target = ObjectRef::of(o).expect("a ref");
        let check = if target.name == "web-i03" {
            Drift::Compared("--- live\n+++ rendered now\n-k: x\n+k: v\n".to_owned())
        } else {
            Drift::Covered
        };
        drift.insert(target, check);
    }
    let trace = trace_of(&first, &observed, &drift, &[]);
    let config = &trace.children[1];
    assert!(config.waiting.is_none());
    assert_eq!(config.objects.len(), ITEMS_SHOWN);
    assert_eq!(config.objects[0].item_key.as_deref(), Some("i00"));
    assert_eq!(
        config.folded,
        Some(Folded {
            count: 5,
            missing: 1,
            drifted: 0,
            held: 0
        })
    );
    let drifting: Vec<&str> = config
        .objects
        .iter()
        .filter(|o| o.drift == Some(true))
        .map(|o| o.object.name.as_str())
        .collect();
    assert_eq!(drifting, ["web-i03"]);
    assert_eq!(config.objects[3].owned_by.as_deref(), Some("ownerReference"));
    assert!(trace.children[0].ready, "the Service has a clusterIP");
}

#[test]
fn a_secret_child_shows_its_keys_and_never_its_values() {
    let set = set();
    let first = parent("web", 0);
    let observed = applied(&plan_of(&set, &first, &[]));
    let secret = observed.iter().find(|o| o["kind"] == "Secret").expect("a Secret");
    let drift = BTreeMap::from([(
        ObjectRef::of(secret).expect("ref"),
        Drift::Compared("-password: aHVudGVyMg==\n+password: hunter2\n".to_owned()),
    )]);
    let trace = trace_of(&first, &observed, &drift, &[]);
    let child = &trace.children[2];
    assert_eq!(child.objects[0].secret_keys, Some(vec!["password".to_owned()]));
    assert_eq!(child.objects[0].drift, Some(true));
    assert_eq!(child.objects[0].drift_diff, None);
    let json = serde_json::to_string(&trace).expect("json");
    assert!(!json.contains("hunter2") && !json.contains("aHVudGVyMg"), "{json}");
}

#[test]
fn an_action_shows_its_record_and_the_object_it_created() {
    let trace = trace_of(&parent("web", 0), &[], &BTreeMap::new(), &[]);
    let seed = &trace.actions[0];
    assert_eq!(seed.id, "seed");
    assert_eq!(seed.phase.as_deref(), Some("Done"));
    assert_eq!(seed.runs, 1);
    assert_eq!(seed.guard_value.as_deref(), Some("generation=1"));
    assert!(seed.would_run, "generation 2 has not run: {}", seed.reason);
    let created = seed.created.as_ref().expect("the created object");
    assert_eq!(
        (created.kind.as_str(), created.name.as_str()),
        ("ConfigMap", "web-seed-0123456789")
    );
    assert_eq!(seed.last_error, None);
}

#[test]
fn events_keep_the_newest_ten_oldest_first_in_either_shape() {
    let mut events: Vec<Value> = (0..12)
        .map(|i| {
            json!({"type": "Normal", "reason": "Reconciled", "message": format!("n{i}"),
                        "lastTimestamp": format!("2026-12-02T10:00:{i:02}Z"), "count": 1,
                        "source": {"component": "ruleop"}})
        })
        .collect();
    events.push(json!({"type": "Warning", "reason": "Failed", "note": "last",
                       "series": {"count": 3, "lastObservedTime": "2026-12-02T10:01:00.000000Z"},
                       "reportingController": "ruleop"}));
    let trace = trace_of(&parent("web", 0), &[], &BTreeMap::new(), &events);
    let notes: Vec<&str> = trace.events.iter().map(|e| e.note.as_str()).collect();
    assert_eq!(notes, ["n3", "n4", "n5", "n6", "n7", "n8", "n9", "n10", "n11", "last"]);
    assert_eq!(trace.events[9].count, 3);
}

#[test]
fn a_hostile_name_and_message_are_bounded_and_cannot_drive_a_terminal() {
    let mut hostile = parent(&format!("x\u{1b}[2J{}", "a".repeat(5000)), 0);
    hostile["status"]["conditions"][0]["message"] = json!(format!("\u{1b}]0;pwned\u{7}{}", "m".repeat(10_000)));
    let set = set();
    let planned = plan::plan_with(
        &set.renderer,
        &set.rules[0],
        &hostile,
        &[],
        &plan::lookups::NoLookups,
        NOW,
    );
    let trace = build(&Inputs {
        rule: &set.rules[0],
        parent: &hostile,
        observed: &[],
        plan: planned.as_ref(),
        drift: &BTreeMap::new(),
        events: &[],
    });
    let error = trace.plan_error.as_deref().expect("a name no child can have");
    assert!(!error.contains('\u{1b}'), "{error}");
    assert!(!trace.parent.identity.name.contains('\u{1b}'));
    assert!(
        trace.parent.identity.name.len() < 400,
        "{}",
        trace.parent.identity.name.len()
    );
    let message = &trace.parent.conditions[0].message;
    assert!(!message.contains('\u{1b}') && !message.contains('\u{7}'));
    assert!(message.ends_with("bytes in all)"), "{message}");
}

#[test]
fn a_failed_plan_is_reported_and_every_child_shown_as_not_desired() {
    let set = set();
    let p = parent("web", 0);
    let error = plan::PlanError::InvalidParent("no spec".to_owned());
    let trace = build(&Inputs {
        rule: &set.rules[0],
        parent: &p,
        observed: &[],
        plan: Err(&error),
        drift: &BTreeMap::new(),
        events: &[],
    });
    assert_eq!(trace.plan_error.as_deref(), Some("invalid custom resource: no spec"));
    assert!(trace.children.iter().all(|c| !c.desired && c.objects.is_empty()));
}

#[test]
fn while_the_parent_is_deleted_its_live_children_show_what_removes_them() {
    let set = set();
    let first = parent("web", 0);
    let observed = applied(&plan_of(&set, &first, &[]));
    let mut deleting = first.clone();
    deleting["metadata"]["deletionTimestamp"] = json!(NOW);
    let trace = trace_of(&deleting, &observed, &BTreeMap::new(), &[]);
    assert_eq!(trace.parent.deletion_timestamp.as_deref(), Some(NOW));
    let service = &trace.children[0];
    assert!(!service.desired);
    assert_eq!(service.objects.len(), 1, "{service:?}");
    assert_eq!(
        service.objects[0].held.as_deref(),
        Some("the parent is being deleted: the next reconcile deletes it"),
        "the parent holds the cleanup finalizer: the engine tears its children down itself"
    );
    assert!(trace.prune.iter().any(|p| p.name == "web-svc"), "{:?}", trace.prune);
}

#[test]
fn a_failed_run_shows_the_error_its_record_keeps() {
    let mut failing = parent("web", 0);
    failing["status"]["actions"]["seed"] = json!({"key": "0123456789abcdef", "guardValue": "generation=2",
        "phase": "Failed", "runs": 2, "attempts": 3, "failedAt": NOW, "error": "ConfigMap web-seed: forbidden\u{1b}[2J"});
    let trace = trace_of(&failing, &[], &BTreeMap::new(), &[]);
    let seed = &trace.actions[0];
    assert_eq!(seed.phase.as_deref(), Some("Failed"));
    assert_eq!((seed.runs, seed.attempts), (2, 3));
    assert_eq!(seed.failed_at.as_deref(), Some(NOW));
    assert_eq!(
        seed.last_error.as_deref(),
        Some("ConfigMap web-seed: forbidden\\u{1b}[2J")
    );
}
