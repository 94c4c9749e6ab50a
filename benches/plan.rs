//! Planning throughput: render + validate one Database (Service, StatefulSet, backup Job, status).

use std::path::Path;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use ruleop::engine::plan;
use ruleop::engine::rules::load::load;
use serde_json::json;

fn plan_database(c: &mut Criterion) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let set = load(&root.join("rules"), &root.join("templates")).expect("shipped rules load");
    let rule = set.rule("database").expect("database rule");
    let parent = json!({
        "apiVersion": "myorg.io/v1", "kind": "Database",
        "metadata": {"name": "orders", "namespace": "shop", "uid": "6a1f", "generation": 3},
        "spec": {"version": "16", "replicas": 3, "storage": {"size": "10Gi"}, "backup": {"enabled": true}},
    });
    let observed = vec![json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "orders", "namespace": "shop",
            "labels": {"ruleop.io/rule": "database", "ruleop.io/parent-uid": "6a1f", "ruleop.io/child": "statefulset"}},
        "status": {"readyReplicas": 3},
    })];
    let mut group = c.benchmark_group("plan");
    group.throughput(Throughput::Elements(1));
    group.bench_function("database", |b| {
        b.iter(|| plan::plan(&set.renderer, rule, &parent, &observed, "2026-11-29T10:00:00Z").expect("plans"))
    });
    group.finish();
}

criterion_group!(benches, plan_database);
criterion_main!(benches);
