//! Tests of the watch streams: object-by-object decoding, skipped objects, health.

use super::*;
use kube::ResourceExt;

fn nested(depth: usize) -> String {
    let mut value = "1".to_owned();
    for _ in 0..depth {
        value = format!("{{\"a\":{value}}}");
    }
    value
}

#[test]
fn one_deeply_nested_item_does_not_fail_the_list() {
    let good = r#"{"apiVersion":"myorg.io/v1","kind":"Blob","metadata":{"name":"good","uid":"u1","resourceVersion":"5"},"spec":{"x":1}}"#;
    let bad = format!(
        r#"{{"apiVersion":"myorg.io/v1","kind":"Blob","metadata":{{"name":"deep","namespace":"ns","uid":"u2","managedFields":[{{"manager":"kubectl","fieldsV1":{}}}]}},"spec":{}}}"#,
        nested(300),
        nested(300)
    );
    let list = format!(
        r#"{{"apiVersion":"myorg.io/v1","kind":"BlobList","metadata":{{"resourceVersion":"9"}},"items":[{good},{bad}]}}"#
    );
    assert!(
        serde_json::from_str::<kube::core::ObjectList<DynamicObject>>(&list).is_err(),
        "the plain decode fails on the whole list"
    );
    let decoded: kube::core::ObjectList<Tolerant> = serde_json::from_str(&list).expect("list decodes");
    assert_eq!(decoded.items.len(), 2);
    assert!(
        matches!(&decoded.items[0], Tolerant::Object { object, bytes } if object.name_any() == "good" && *bytes == good.len())
    );
    match &decoded.items[1] {
        Tolerant::Undecodable { metadata, error } => {
            assert_eq!(metadata.name.as_deref(), Some("deep"));
            assert!(error.contains("recursion limit exceeded"), "{error}");
        }
        other => panic!("expected undecodable, got {other:?}"),
    }
}

#[test]
fn cached_objects_leave_out_managed_fields_and_the_last_applied_copy_but_keep_the_rest() {
    let text = r#"{"apiVersion":"v1","kind":"Service","metadata":{"name":"orders-svc","namespace":"shop",
        "uid":"u1","resourceVersion":"7","generation":2,"labels":{"ruleop.io/rule":"database"},
        "annotations":{"ruleop.io/desired-hash":"abc","kubectl.kubernetes.io/last-applied-configuration":"{}"},
        "ownerReferences":[{"apiVersion":"myorg.io/v1","kind":"Database","name":"orders","uid":"p1","controller":true}],
        "finalizers":["f"],"creationTimestamp":"2026-11-30T08:00:00Z","selfLink":"/x",
        "managedFields":[{"manager":"ruleop","operation":"Apply","fieldsType":"FieldsV1","fieldsV1":{"f:spec":{"f:ports":{}}}}]},
        "spec":{"ports":[{"port":5432}],"clusterIP":"10.0.0.9"},"status":{"loadBalancer":{}}}"#;
    let Tolerant::Object { object, .. } = Tolerant::from_json(text) else {
        panic!("decodes")
    };
    let meta = &object.metadata;
    assert!(meta.managed_fields.is_none() && meta.self_link.is_none());
    let annotations = meta.annotations.as_ref().expect("annotations");
    assert_eq!(annotations.keys().collect::<Vec<_>>(), ["ruleop.io/desired-hash"]);
    assert_eq!(meta.labels.as_ref().expect("labels").len(), 1);
    assert_eq!(meta.owner_references.as_ref().expect("owners")[0].uid, "p1");
    assert_eq!(
        (meta.generation, meta.resource_version.as_deref(), meta.uid.as_deref()),
        (Some(2), Some("7"), Some("u1"))
    );
    assert!(meta.creation_timestamp.is_some() && meta.finalizers.is_some());
    let types = object.types.as_ref().expect("types");
    assert_eq!((types.api_version.as_str(), types.kind.as_str()), ("v1", "Service"));
    assert_eq!(
        object.data,
        serde_json::json!({"spec": {"ports": [{"port": 5432}], "clusterIP": "10.0.0.9"}, "status": {"loadBalancer": {}}})
    );
    // Serialized again (the children cache, plans), it is the object as served, less the above.
    let again = serde_json::to_value(&object).expect("serializes");
    assert_eq!(again["metadata"]["name"], "orders-svc");
    assert_eq!(again["kind"], "Service");
    assert!(again["metadata"].get("managedFields").is_none());
}

#[test]
fn an_item_of_a_list_without_type_fields_decodes_without_them() {
    let Tolerant::Object { object, .. } = Tolerant::from_json(r#"{"metadata":{"name":"a"},"spec":{}}"#) else {
        panic!("decodes")
    };
    assert!(object.types.is_none());
    assert_eq!(object.data, serde_json::json!({"spec": {}}));
}

fn event(line: serde_json::Value) -> kube::Result<WatchEvent<DynamicObject>> {
    Ok(serde_json::from_value(line).expect("a watch event"))
}

fn bookmark(annotations: serde_json::Value) -> kube::Result<WatchEvent<DynamicObject>> {
    event(
        serde_json::json!({"type": "BOOKMARK", "object": {"apiVersion": "v1", "kind": "Service",
        "metadata": {"resourceVersion": "12", "annotations": annotations}}}),
    )
}

#[test]
fn the_probe_streams_only_after_the_bookmark_that_ends_the_initial_events() {
    let ends = |events: Vec<kube::Result<WatchEvent<DynamicObject>>>| {
        futures::executor::block_on(ends_initial_events(futures::stream::iter(events)))
    };
    let added = event(
        serde_json::json!({"type": "ADDED", "object": {"apiVersion": "v1", "kind": "Service",
        "metadata": {"name": "a", "resourceVersion": "11"}}}),
    );
    let end = || bookmark(serde_json::json!({INITIAL_EVENTS_END: "true"}));
    assert!(ends(vec![end()]), "a server that streams lists");
    assert!(
        ends(vec![added, bookmark(serde_json::json!({})), end()]),
        "objects and a plain bookmark first"
    );
    assert!(
        !ends(vec![]),
        "a server that ignores sendInitialEvents ends the watch without the bookmark"
    );
    let refused = event(
        serde_json::json!({"type": "ERROR", "object": {"code": 422, "message": "resourceVersionMatch is forbidden for watch", "reason": "Invalid", "status": "Failure"}}),
    );
    assert!(!ends(vec![refused, end()]), "an error event");
    assert!(
        !ends(vec![Err(kube::Error::LinesCodecMaxLineLengthExceeded), end()]),
        "a broken stream"
    );
}

#[test]
fn a_watch_event_with_a_deeply_nested_object_decodes_to_its_metadata() {
    let line = format!(
        r#"{{"type":"MODIFIED","object":{{"apiVersion":"myorg.io/v1","kind":"Blob","metadata":{{"name":"deep","resourceVersion":"7"}},"spec":{}}}}}"#,
        nested(1000)
    );
    let event: kube::core::WatchEvent<Tolerant> = serde_json::from_str(&line).expect("event decodes");
    match event {
        kube::core::WatchEvent::Modified(Tolerant::Undecodable { metadata, .. }) => {
            assert_eq!(metadata.resource_version.as_deref(), Some("7"));
        }
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn an_object_over_the_size_cap_is_left_out_of_the_caches_and_reported() {
    use watcher::Event as E;
    let small = r#"{"metadata":{"name":"small","uid":"u1","resourceVersion":"1"},"data":{"a":"b"}}"#;
    let big = format!(
        r#"{{"metadata":{{"name":"big","uid":"u2","resourceVersion":"2"}},"data":{{"a":"{}"}}}}"#,
        "x".repeat(2000)
    );
    let reported = std::cell::RefCell::new(Vec::new());
    let report = |metadata: &ObjectMeta, why: &Skipped| {
        reported
            .borrow_mut()
            .push((metadata.name.clone().unwrap_or_default(), why.clone()));
    };
    let kept = |event| match decoded(Ok(event), 1024, report) {
        Some(Ok(E::InitApply(o) | E::Apply(o))) => Some(("kept", o.name_any())),
        Some(Ok(E::Delete(o))) => Some(("deleted", o.name_any())),
        _ => None,
    };
    assert_eq!(
        kept(E::InitApply(Tolerant::from_json(small))),
        Some(("kept", "small".to_owned()))
    );
    assert_eq!(
        kept(E::InitApply(Tolerant::from_json(&big))),
        None,
        "left out of the relist"
    );
    assert_eq!(
        kept(E::Apply(Tolerant::from_json(&big))),
        Some(("deleted", "big".to_owned())),
        "an older, smaller version leaves the caches"
    );
    let reported = reported.borrow();
    assert_eq!(reported.len(), 2);
    assert_eq!(reported[0].0, "big");
    assert!(matches!(reported[0].1, Skipped::TooLarge { bytes, cap: 1024 } if bytes == big.len()));
    assert!(
        reported[0]
            .1
            .message("ConfigMap")
            .contains(&format!("{} bytes, over ruleop's cap of 1024", big.len()))
    );
    assert_eq!(reported[0].1.reason(), "ObjectTooLarge");
}

#[test]
fn sizes_are_bytes_or_a_number_with_ki_or_mi() {
    assert_eq!(parse_size("256Ki"), Ok(256 * 1024));
    assert_eq!(parse_size("1Mi"), Ok(1 << 20));
    assert_eq!(parse_size("4096"), Ok(4096));
    assert!(parse_size("0").is_err());
    assert!(parse_size("1KB").unwrap_err().contains("unknown unit \"KB\""));
    assert!(parse_size("Ki").is_err());
    assert!(parse_size("99999999999999999999Mi").is_err());
}
