//! Snapshot tests of the tree text.

use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::tree;
use crate::engine::plan::children::ObjectRef;
use crate::inspect::trace::model::Drift;
use crate::inspect::trace::testkit::{applied, parent, plan_of, set, trace_of};

#[test]
fn a_parent_waiting_for_its_first_child_renders_as_plain_text() {
    let events = [
        json!({"type": "Normal", "reason": "Reconciled", "message": "created Service ns/web-svc",
                         "lastTimestamp": "2026-12-02T10:00:00Z", "count": 2}),
    ];
    let trace = trace_of(&parent("web", 2), &[], &BTreeMap::new(), &events);
    insta::assert_snapshot!(tree(&trace, false));
}

#[test]
fn items_fold_after_twenty_and_a_drifting_item_shows_its_diff() {
    let set = set();
    let first = parent("web", 23);
    let service = applied(&plan_of(&set, &first, &[]));
    let observed: Vec<Value> = applied(&plan_of(&set, &first, &service));
    let drift: BTreeMap<ObjectRef, Drift> = observed
        .iter()
        .filter_map(ObjectRef::of)
        .map(|target| {
            let check = if target.name == "web-i01" {
                Drift::Compared("--- live\n+++ rendered now\n@@ -1 +1 @@\n-k: x\n+k: v\n".to_owned())
            } else {
                Drift::Covered
            };
            (target, check)
        })
        .collect();
    let trace = trace_of(&first, &observed, &drift, &[]);
    insta::assert_snapshot!(tree(&trace, false));
}

#[test]
fn on_a_terminal_the_marks_are_coloured_symbols() {
    let trace = trace_of(&parent("web", 0), &[], &BTreeMap::new(), &[]);
    let text = tree(&trace, true);
    assert!(text.contains("\u{1b}[31m✗\u{1b}[0m not Ready"), "{text}");
    assert!(!tree(&trace, false).contains('\u{1b}'));
}
