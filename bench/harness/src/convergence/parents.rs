//! The parents: their kinds, creating N of them, and clearing a namespace afterwards.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams, PostParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::{Value, json};
use tokio::sync::mpsc;

use crate::convergence::contenders::Created;

/// A parent kind: every contender's is called Database, in its own group.
pub struct ParentKind {
    /// The API group.
    pub group: &'static str,
    /// The version.
    pub version: &'static str,
    /// The plural (the API server's `resource` label; `databases` for every contender, so the
    /// write counts line up).
    pub plural: &'static str,
}

/// deploy/crds/database.yaml (ruleop, the floor, kopf).
pub static DATABASE: ParentKind = ParentKind {
    group: "myorg.io",
    version: "v1",
    plural: "databases",
};

/// The CRD kro generates from bench/kro/database-rgd.yaml.
pub static KRO_DATABASE: ParentKind = ParentKind {
    group: "kro.myorg.io",
    version: "v1",
    plural: "databases",
};

impl ParentKind {
    /// For dynamic APIs.
    pub fn resource(&self) -> ApiResource {
        ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(self.group, self.version, "Database"),
            self.plural,
        )
    }

    /// The parent every contender gets: version 16, one replica, 1Gi, backups on.
    pub fn object(&self, name: &str) -> Value {
        json!({
            "apiVersion": format!("{}/{}", self.group, self.version),
            "kind": "Database",
            "metadata": {"name": name},
            "spec": {"version": "16", "replicas": 1, "storage": {"size": "1Gi"}, "backup": {"enabled": true}},
        })
    }
}

/// `db-00000`, ...
pub fn parent_name(i: usize) -> String {
    format!("db-{i:05}")
}

/// Creates N parents, `in_flight` at a time; returns each one's send time. Hands each created
/// parent to an in-harness contender when there is one.
pub async fn create_parents(
    client: &Client,
    kind: &ParentKind,
    ns: &str,
    n: usize,
    in_flight: usize,
    handover: Option<mpsc::UnboundedSender<Created>>,
) -> Result<HashMap<String, Instant>> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kind.resource());
    let sent = stream::iter(0..n)
        .map(|i| {
            let (api, handover) = (api.clone(), handover.clone());
            async move {
                let name = parent_name(i);
                let object: DynamicObject = serde_json::from_value(kind.object(&name))?;
                let at = Instant::now();
                let created = api
                    .create(&PostParams::default(), &object)
                    .await
                    .with_context(|| format!("create Database {name}"))?;
                if let Some(handover) = handover {
                    let uid = created.metadata.uid.clone().unwrap_or_default();
                    let _ = handover.send((name.clone(), uid, created.metadata.generation.unwrap_or(1)));
                }
                anyhow::Ok((name, at))
            }
        })
        .buffer_unordered(in_flight.max(1))
        .try_collect::<HashMap<_, _>>()
        .await?;
    Ok(sent)
}

/// Removes every finalizer from the parents of a namespace (after the measurement): ruleop's
/// final-backup finalizer and kro's would hold the namespace with the operator stopped.
pub async fn release_finalizers(client: &Client, kind: &ParentKind, ns: &str) -> Result<()> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &kind.resource());
    let held: Vec<String> = api
        .list_metadata(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|d| d.metadata.finalizers.as_ref().is_some_and(|f| !f.is_empty()))
        .filter_map(|d| d.metadata.name)
        .collect();
    let patch = json!({"metadata": {"finalizers": null}});
    stream::iter(held)
        .map(|name| {
            let (api, patch) = (api.clone(), patch.clone());
            async move { api.patch(&name, &PatchParams::default(), &Patch::Merge(&patch)).await }
        })
        .buffer_unordered(16)
        .try_collect::<Vec<_>>()
        .await?;
    Ok(())
}

/// Creates a namespace.
pub async fn create_namespace(client: &Client, ns: &str) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    namespaces
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": ns}}))?,
        )
        .await
        .with_context(|| format!("create namespace {ns}"))?;
    Ok(())
}

/// Deletes a namespace and waits until it is gone (at most 900 s, or 1,800 s at N >= 10,000).
pub async fn delete_namespace(client: &Client, ns: &str, n: usize) -> Result<Duration> {
    let api: Api<Namespace> = Api::all(client.clone());
    let start = Instant::now();
    api.delete(ns, &DeleteParams::default()).await?;
    let cap = Duration::from_secs(if n >= 10_000 { 1800 } else { 900 });
    loop {
        match api.get_opt(ns).await? {
            None => return Ok(start.elapsed()),
            Some(_) if start.elapsed() > cap => bail!("namespace {ns} still exists after {cap:?}"),
            Some(_) => tokio::time::sleep(Duration::from_millis(250)).await,
        }
    }
}
