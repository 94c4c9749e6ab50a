//! Child lifecycle policies as values: how a live child takes a changed rendering
//! (`updateStrategy`) and what becomes of it when it is pruned or its parent is deleted
//! (`deletionPolicy`: delete it, or release it with one merge patch).

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;
use serde_json::{Map, Value, json};

use super::children::{ChildUpdate, DesiredChild, ObjectRef, desired_hash, live_hash};
use super::context::{LABEL_CHILD, is_deleting};
use super::label;
use super::order::Readiness;
use crate::engine::rules::Rule;
use crate::engine::rules::model::{DeletionPolicy, UpdateStrategy};

/// Annotation on a child rendered with `deletionPolicy: Orphan`: the live object itself says it
/// is to be released, so it is even when the rule no longer declares the child.
pub(crate) const ANNOTATION_DELETION_POLICY: &str = "ruleop.io/deletion-policy";

/// The annotation's value for `Orphan`.
const ORPHAN: &str = "Orphan";

/// Labels and annotations under this prefix are ruleop's; a release removes them all.
const OURS: &str = "ruleop.io/";

/// An orphaned child to release: the merge patch that makes it nobody's.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    /// The object.
    #[serde(flatten)]
    pub target: ObjectRef,
    /// The JSON merge patch: our labels and annotations set to null, the parent's
    /// ownerReference gone, under the object's resourceVersion.
    pub patch: Value,
}

/// Marks a rendered child whose policy is `Orphan`.
pub(crate) fn mark(object: &mut Value, policy: DeletionPolicy) {
    if policy != DeletionPolicy::Orphan {
        return;
    }
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        let annotations = metadata.entry("annotations").or_insert_with(|| json!({}));
        if let Some(annotations) = annotations.as_object_mut() {
            annotations.insert(ANNOTATION_DELETION_POLICY.to_owned(), json!(ORPHAN));
        }
    }
}

/// Whether a live child is released rather than deleted: the rule's child of its id says so,
/// or, for a child the rule no longer declares, its annotation does. The annotation of a child
/// the rule declares is not read: whoever may edit the object (a tenant) could add it to keep
/// what the rule deletes.
pub(crate) fn is_orphaned(rule: &Rule, live: &Value) -> bool {
    let declared = label(live, LABEL_CHILD).and_then(|id| rule.spec.children.iter().find(|c| c.id.value == id));
    match declared {
        Some(child) => child.deletion_policy == DeletionPolicy::Orphan,
        None => {
            live.pointer("/metadata/annotations")
                .and_then(|a| a.get(ANNOTATION_DELETION_POLICY))
                .and_then(Value::as_str)
                == Some(ORPHAN)
        }
    }
}

/// The release of a live child of the parent `parent_uid`.
pub(crate) fn release(live: &Value, parent_uid: &str) -> Option<Release> {
    let target = ObjectRef::of(live)?;
    let nulled = |pointer: &str| -> Map<String, Value> {
        live.pointer(pointer)
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|m| m.keys())
            .filter(|k| k.starts_with(OURS))
            .map(|k| (k.clone(), Value::Null))
            .collect()
    };
    let mut metadata = Map::new();
    metadata.insert(
        "resourceVersion".to_owned(),
        live.pointer("/metadata/resourceVersion")
            .cloned()
            .unwrap_or(Value::Null),
    );
    metadata.insert("labels".to_owned(), Value::Object(nulled("/metadata/labels")));
    metadata.insert("annotations".to_owned(), Value::Object(nulled("/metadata/annotations")));
    if let Some(references) = live.pointer("/metadata/ownerReferences").and_then(Value::as_array) {
        let kept: Vec<Value> = references
            .iter()
            .filter(|r| r.get("uid").and_then(Value::as_str) != Some(parent_uid))
            .cloned()
            .collect();
        if kept.len() != references.len() {
            let kept = if kept.is_empty() {
                Value::Null
            } else {
                Value::Array(kept)
            };
            metadata.insert("ownerReferences".to_owned(), kept);
        }
    }
    Some(Release {
        target,
        patch: json!({ "metadata": metadata }),
    })
}

/// Splits live children to remove into those to delete and those to release.
pub(crate) fn removals<'a>(
    rule: &Rule,
    parent_uid: &str,
    objects: impl IntoIterator<Item = &'a Value>,
) -> (Vec<&'a Value>, Vec<Release>) {
    let mut deletes = Vec::new();
    let mut releases = Vec::new();
    for object in objects {
        if is_orphaned(rule, object) {
            releases.extend(release(object, parent_uid));
        } else {
            deletes.push(object);
        }
    }
    (deletes, releases)
}

/// Sets each desired child's [`ChildUpdate`] from its rule's `updateStrategy`, the live objects
/// (`ours`) and the children's readiness. A child that does not exist yet is always created.
/// A rolling `forEach` changes its first changed item (in item order) only while every item
/// exists, is ready and none is being deleted; the others keep their live objects.
pub(crate) fn update_strategies(
    rule: &Rule,
    desired: &mut [DesiredChild],
    ours: &[&Value],
    readiness: &BTreeMap<String, Readiness>,
) {
    let live: BTreeMap<ObjectRef, &Value> = ours.iter().filter_map(|o| Some((ObjectRef::of(o)?, *o))).collect();
    let strategy = |id: &str| {
        rule.spec
            .children
            .iter()
            .find(|c| c.id.value == id)
            .map_or(UpdateStrategy::InPlace, |c| c.update_strategy)
    };
    let settling: BTreeSet<String> = desired
        .iter()
        .filter(|c| live.get(&c.target).is_some_and(|l| is_deleting(l)))
        .map(|c| c.id.clone())
        .collect();
    let mut rolling_turn_taken = BTreeSet::new();
    for child in desired.iter_mut() {
        let Some(live) = live.get(&child.target) else {
            continue;
        };
        let changed = live_hash(live) != Some(desired_hash(&child.object).as_str());
        let terminating = is_deleting(live);
        child.update = match strategy(&child.id) {
            UpdateStrategy::InPlace => ChildUpdate::Apply,
            UpdateStrategy::OnDelete => ChildUpdate::Keep,
            UpdateStrategy::Recreate if terminating => ChildUpdate::Keep,
            UpdateStrategy::Recreate if changed => ChildUpdate::Recreate,
            UpdateStrategy::Recreate => ChildUpdate::Apply,
            rolling => {
                let settled = !settling.contains(&child.id) && readiness.get(&child.id).is_some_and(|r| r.ready);
                if terminating {
                    ChildUpdate::Keep
                } else if !changed {
                    ChildUpdate::Apply
                } else if settled && rolling_turn_taken.insert(child.id.clone()) {
                    match rolling {
                        UpdateStrategy::RollingRecreate => ChildUpdate::Recreate,
                        _ => ChildUpdate::Apply,
                    }
                } else {
                    ChildUpdate::Keep
                }
            }
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::rules::model::ImmutableChangePolicy;

    fn rule(children: &str) -> Rule {
        Rule::from_spec_yaml(&format!(
            "watch: {{apiVersion: myorg.io/v1, kind: Database}}\nchildren:\n{children}"
        ))
    }

    fn child(id: &str, name: &str, object: Value) -> DesiredChild {
        DesiredChild {
            id: id.to_owned(),
            target: ObjectRef {
                api_version: "v1".to_owned(),
                kind: "ConfigMap".to_owned(),
                namespace: "shop".to_owned(),
                name: name.to_owned(),
            },
            object,
            on_immutable_change: ImmutableChangePolicy::Report,
            adopt: false,
            update: ChildUpdate::Apply,
        }
    }

    fn rendered(name: &str, data: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "shop"}, "data": {"x": data}})
    }

    fn live_of(desired: &Value, deleting: bool) -> Value {
        let mut live = desired.clone();
        live["metadata"]["annotations"] =
            json!({ super::super::children::ANNOTATION_DESIRED_HASH: desired_hash(desired) });
        if deleting {
            live["metadata"]["deletionTimestamp"] = json!("2026-12-02T10:00:00Z");
        }
        live
    }

    fn ready(id: &str, ready: bool) -> BTreeMap<String, Readiness> {
        BTreeMap::from([(
            id.to_owned(),
            Readiness {
                ready,
                why: String::new(),
            },
        )])
    }

    fn decide(strategy: &str, desired: &mut [DesiredChild], live: &[Value], all_ready: bool) -> Vec<ChildUpdate> {
        let r = rule(&format!(
            "  - id: c\n    apiVersion: v1\n    kind: ConfigMap\n    template: c.j2\n    updateStrategy: {strategy}\n"
        ));
        let ours: Vec<&Value> = live.iter().collect();
        update_strategies(&r, desired, &ours, &ready("c", all_ready));
        desired.iter().map(|c| c.update).collect()
    }

    #[test]
    fn on_delete_keeps_a_live_child_and_creates_a_missing_one() {
        let mut desired = [
            child("c", "a", rendered("a", "new")),
            child("c", "b", rendered("b", "new")),
        ];
        let live = [live_of(&rendered("a", "old"), false)];
        assert_eq!(
            decide("OnDelete", &mut desired, &live, true),
            [ChildUpdate::Keep, ChildUpdate::Apply]
        );
    }

    #[test]
    fn recreate_deletes_on_a_changed_rendering_repairs_drift_in_place_and_waits_for_a_deletion() {
        let mut changed = [child("c", "a", rendered("a", "new"))];
        let old = [live_of(&rendered("a", "old"), false)];
        assert_eq!(decide("Recreate", &mut changed, &old, true), [ChildUpdate::Recreate]);

        let mut same = [child("c", "a", rendered("a", "new"))];
        let mut drifted = live_of(&rendered("a", "new"), false);
        drifted["data"]["x"] = json!("edited by hand");
        assert_eq!(decide("Recreate", &mut same, &[drifted], true), [ChildUpdate::Apply]);

        let deleting = [live_of(&rendered("a", "old"), true)];
        assert_eq!(decide("Recreate", &mut changed, &deleting, true), [ChildUpdate::Keep]);
    }

    #[test]
    fn a_rolling_for_each_changes_one_item_at_a_time_and_only_when_all_are_ready() {
        let mut desired = [
            child("c", "a", rendered("a", "new")),
            child("c", "b", rendered("b", "new")),
            child("c", "d", rendered("d", "new")),
        ];
        let live = [
            live_of(&rendered("a", "new"), false),
            live_of(&rendered("b", "old"), false),
            live_of(&rendered("d", "old"), false),
        ];
        assert_eq!(
            decide("RollingInPlace", &mut desired, &live, true),
            [ChildUpdate::Apply, ChildUpdate::Apply, ChildUpdate::Keep]
        );
        assert_eq!(
            decide("RollingRecreate", &mut desired, &live, true),
            [ChildUpdate::Apply, ChildUpdate::Recreate, ChildUpdate::Keep]
        );
        assert_eq!(
            decide("RollingRecreate", &mut desired, &live, false),
            [ChildUpdate::Apply, ChildUpdate::Keep, ChildUpdate::Keep],
            "an item not ready holds every change"
        );
        let settling = [
            live_of(&rendered("a", "new"), true),
            live_of(&rendered("b", "old"), false),
            live_of(&rendered("d", "old"), false),
        ];
        assert_eq!(
            decide("RollingRecreate", &mut desired, &settling, true),
            [ChildUpdate::Keep, ChildUpdate::Keep, ChildUpdate::Keep],
            "an item being deleted holds every change"
        );
    }

    #[test]
    fn a_release_removes_our_labels_annotations_and_owner_reference_and_keeps_the_rest() {
        let live = json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {
                "name": "orders-backups", "namespace": "shop", "resourceVersion": "42",
                "labels": {"ruleop.io/rule": "database", "ruleop.io/parent-uid": "u1", "app": "orders"},
                "annotations": {"ruleop.io/desired-hash": "ab", ANNOTATION_DELETION_POLICY: "Orphan", "note": "keep"},
                "ownerReferences": [{"uid": "u1", "kind": "Database", "name": "orders"}, {"uid": "u2", "kind": "Other", "name": "x"}]
            }
        });
        let release = release(&live, "u1").expect("a release");
        assert_eq!(
            release.patch,
            json!({"metadata": {
                "resourceVersion": "42",
                "labels": {"ruleop.io/rule": null, "ruleop.io/parent-uid": null},
                "annotations": {"ruleop.io/desired-hash": null, ANNOTATION_DELETION_POLICY: null},
                "ownerReferences": [{"uid": "u2", "kind": "Other", "name": "x"}]
            }})
        );
        let only_ours = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "ownerReferences": [{"uid": "u1"}]}});
        assert_eq!(release_of(&only_ours)["metadata"]["ownerReferences"], Value::Null);
        assert!(release_of(&only_ours)["metadata"].get("ownerReferences").is_some());
    }

    fn release_of(live: &Value) -> Value {
        release(live, "u1").expect("a release").patch
    }

    #[test]
    fn a_child_is_orphaned_by_its_rule_or_once_dropped_by_its_annotation_never_by_a_forged_one() {
        let r = rule(
            "  - id: c\n    apiVersion: v1\n    kind: ConfigMap\n    template: c.j2\n    deletionPolicy: Orphan\n",
        );
        let by_rule =
            json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "labels": {LABEL_CHILD: "c"}}});
        let mut by_annotation = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b", "labels": {LABEL_CHILD: "gone"}}});
        mark(&mut by_annotation, DeletionPolicy::Orphan);
        let deleted = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "d", "labels": {LABEL_CHILD: "gone"}}});
        let (deletes, releases) = removals(&r, "u1", [&by_rule, &by_annotation, &deleted]);
        assert_eq!(deletes, [&deleted]);
        // A tenant who can edit a child the rule deletes cannot keep it by annotating it.
        let deleting = rule("  - id: c\n    apiVersion: v1\n    kind: ConfigMap\n    template: c.j2\n");
        let mut forged = by_rule.clone();
        mark(&mut forged, DeletionPolicy::Orphan);
        let (deletes, releases_forged) = removals(&deleting, "u1", [&forged]);
        assert_eq!((deletes, releases_forged.len()), (vec![&forged], 0));
        assert_eq!(
            releases.iter().map(|r| r.target.name.as_str()).collect::<Vec<_>>(),
            ["a", "b"]
        );
    }
}
