//! Tests of plan(): children, prune, actions and status planned from a parent and what is observed.

use super::*;

fn desired(revision: Option<u64>) -> DesiredStatus {
    DesiredStatus {
        generation: 1,
        fields: Map::new(),
        conditions: Vec::new(),
        revision,
    }
}

const NOW: &str = "2026-12-04T00:00:00Z";

#[test]
fn the_revision_rides_on_a_status_write_made_anyway_and_never_makes_one_alone() {
    let unchanged = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 1, "conditions": [], REVISION_FIELD: 1}});
    assert_eq!(
        desired(Some(2)).patch_against(&unchanged, &[], NOW),
        None,
        "a status that holds is not written for the revision"
    );
    let stale = json!({"metadata": {"generation": 1}, "status": {"observedGeneration": 0, REVISION_FIELD: 1}});
    let patch = desired(Some(2)).patch_against(&stale, &[], NOW).expect("a patch");
    assert_eq!(patch["status"][REVISION_FIELD], 2);
    assert_eq!(patch["status"]["observedGeneration"], 1);
    let without = desired(None).patch_against(&stale, &[], NOW).expect("a patch");
    assert!(
        without["status"].get(REVISION_FIELD).is_none(),
        "a rule without a revision writes none"
    );
}

#[test]
fn changed_children_record_the_revision_only_when_the_parent_names_another() {
    let on_one = json!({"status": {REVISION_FIELD: 1}});
    assert_eq!(
        desired(Some(2)).revision_patch(&on_one),
        Some(json!({"status": {REVISION_FIELD: 2}}))
    );
    assert_eq!(desired(Some(1)).revision_patch(&on_one), None);
    assert_eq!(desired(None).revision_patch(&on_one), None);
    let garbage = json!({"status": {REVISION_FIELD: "two"}});
    assert_eq!(
        desired(Some(2)).revision_patch(&garbage),
        Some(json!({"status": {REVISION_FIELD: 2}})),
        "a value someone else wrote is replaced"
    );
}
