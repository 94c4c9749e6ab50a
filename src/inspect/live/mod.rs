//! Read-only access to the live cluster, shared by `ruleop diff` and `ruleop trace`: the client,
//! a rule's parents, their labelled children and looked-up objects, loaded as the operator's
//! caches would hold them (JSON values, managedFields kept on children for the drift check),
//! and the server-side apply dry run that tells what applying a child would change.

pub(crate) mod dry_run;
pub(crate) mod fields;

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use serde_json::Value;

use crate::cache::discovery::Kinds;
use crate::engine::plan;
use crate::engine::plan::context::{LABEL_PARENT_UID, LABEL_RULE, ParentRef};
use crate::engine::plan::lookups::{LookupKey, LookupSource};
use crate::engine::rules::{Rule, RuleSet};

/// The async runtime a read-only command runs on (two workers: it waits on the API server, it
/// does not compute), or `None` after saying why it could not start.
pub(crate) fn runtime() -> Option<tokio::runtime::Runtime> {
    match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => Some(runtime),
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            None
        }
    }
}

/// The rules a read-only command works with, or `None` after printing why they are invalid
/// (`what` names them: "rules", "proposed rules").
pub(crate) fn load_rules(sources: &crate::offline::Sources, what: &str) -> Option<RuleSet> {
    match crate::engine::rules::load::load(&sources.rules, &sources.templates) {
        Ok(set) => Some(set),
        Err(diagnostics) => {
            eprintln!("{diagnostics}\nerror: the {what} are invalid");
            None
        }
    }
}

/// A client for the cluster of the kubeconfig (or the in-cluster service account), with every
/// kind of `set` resolved through discovery.
pub(crate) async fn connect(set: &RuleSet) -> anyhow::Result<(Client, Kinds)> {
    let config = crate::apply::client::cluster_config()
        .await
        .context("cannot connect to the cluster (kubeconfig or in-cluster config)")?;
    let client = Client::try_from(config).context("cannot build a client for the cluster")?;
    let mut kinds = Kinds::default();
    if let Some(unknown) = kinds.resolve(&client, set).await.into_iter().next() {
        return Err(unknown.into());
    }
    Ok((client, kinds))
}

/// The rule's live children of one parent, by parent UID (see [`list_children`]).
pub(crate) fn children_of<'a>(children: &'a HashMap<String, Vec<Value>>, parent: &Value) -> &'a [Value] {
    let uid = parent
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .unwrap_or_default();
    children.get(uid).map(Vec::as_slice).unwrap_or_default()
}

pub(crate) fn strip_managed_fields(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    object
}

pub(crate) fn api_for(
    client: &Client,
    kinds: &Kinds,
    api_version: &str,
    kind: &str,
    namespace: Option<&str>,
) -> anyhow::Result<Api<DynamicObject>> {
    let served = kinds
        .get(api_version, kind)
        .with_context(|| format!("{api_version} {kind} is not a resolved kind"))?;
    Ok(match namespace {
        Some(ns) if served.namespaced => Api::namespaced_with(client.clone(), ns, &served.resource),
        _ => Api::all_with(client.clone(), &served.resource),
    })
}

/// Every object of a LIST as JSON, decoded once (not through typed objects: a thousand
/// StatefulSets with their managedFields are megabytes), with apiVersion and kind set (items
/// of a list of a built-in kind come without them).
pub(crate) async fn list_values(
    client: &Client,
    api: &Api<DynamicObject>,
    params: &ListParams,
    api_version: &str,
    kind: &str,
) -> anyhow::Result<Vec<Value>> {
    let request = kube::core::Request::new(api.resource_url()).list(params)?;
    let mut list: Value = client.request(request).await?;
    let Some(Value::Array(items)) = list.get_mut("items").map(Value::take) else {
        return Ok(Vec::new());
    };
    Ok(items
        .into_iter()
        .map(|mut item| {
            if let Some(map) = item.as_object_mut() {
                map.entry("apiVersion").or_insert_with(|| Value::from(api_version));
                map.entry("kind").or_insert_with(|| Value::from(kind));
            }
            item
        })
        .collect())
}

/// The rule's parents, sorted by namespace and name.
pub(crate) async fn list_parents(
    client: &Client,
    kinds: &Kinds,
    rule: &Rule,
    namespace: Option<&str>,
    extra_selector: Option<&str>,
) -> anyhow::Result<Vec<Value>> {
    let watch = &rule.spec.watch;
    let selector: Vec<&str> = [watch.label_selector.as_deref(), extra_selector]
        .into_iter()
        .flatten()
        .filter(|s| !s.trim().is_empty())
        .collect();
    let params = ListParams::default().labels(&selector.join(","));
    let api = api_for(client, kinds, &watch.api_version, &watch.kind, namespace)?;
    let list = list_values(client, &api, &params, &watch.api_version, &watch.kind)
        .await
        .with_context(|| format!("listing {} {} of rule {:?}", watch.api_version, watch.kind, rule.name))?;
    let mut parents: Vec<Value> = list
        .into_iter()
        .map(strip_managed_fields)
        .filter(|p| {
            let ns = p
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .unwrap_or_default();
            (watch.namespaces.is_empty() || watch.namespaces.iter().any(|w| w == ns)) && rule.selects(p)
        })
        .collect();
    let key = |p: &Value| {
        let text = |ptr: &str| p.pointer(ptr).and_then(Value::as_str).unwrap_or_default().to_owned();
        (text("/metadata/namespace"), text("/metadata/name"))
    };
    parents.sort_by_key(key);
    Ok(parents)
}

/// The rule's live children (with their managedFields) by parent UID: every object of a child
/// kind labelled with the rule (and with `parent_uid`, only that parent's), in `namespace` or
/// all namespaces.
pub(crate) async fn list_children(
    client: &Client,
    kinds: &Kinds,
    rule: &Rule,
    namespace: Option<&str>,
    parent_uid: Option<&str>,
) -> anyhow::Result<HashMap<String, Vec<Value>>> {
    let mut kinds_of_children: Vec<(&str, &str)> = rule
        .spec
        .children
        .iter()
        .map(|c| (c.api_version.as_str(), c.kind.as_str()))
        .collect();
    kinds_of_children.sort();
    kinds_of_children.dedup();
    let mut selector = format!("{LABEL_RULE}={}", rule.name);
    if let Some(uid) = parent_uid {
        selector.push_str(&format!(",{LABEL_PARENT_UID}={uid}"));
    }
    let params = ListParams::default().labels(&selector);
    let mut by_parent: HashMap<String, Vec<Value>> = HashMap::new();
    for (api_version, kind) in kinds_of_children {
        let api = api_for(client, kinds, api_version, kind, namespace)?;
        let list = list_values(client, &api, &params, api_version, kind)
            .await
            .with_context(|| format!("listing {api_version} {kind} children of rule {:?}", rule.name))?;
        for object in list {
            let uid = object
                .pointer(&format!("/metadata/labels/{}", LABEL_PARENT_UID.replace('/', "~1")))
                .and_then(Value::as_str);
            if let Some(uid) = uid {
                by_parent.entry(uid.to_owned()).or_default().push(object);
            }
        }
    }
    Ok(by_parent)
}

/// Looked-up objects, read once per key: none or one by name, every match for a list key.
pub(crate) struct ReadLookups(pub BTreeMap<LookupKey, Vec<Value>>);

impl LookupSource for ReadLookups {
    fn get(&self, key: &LookupKey) -> Option<Value> {
        self.0.get(key).and_then(|objects| objects.first().cloned())
    }

    fn list(&self, key: &LookupKey) -> Vec<Value> {
        self.0.get(key).cloned().unwrap_or_default()
    }
}

pub(crate) async fn read_lookups(
    client: &Client,
    kinds: &Kinds,
    set: &RuleSet,
    rule: &Rule,
    parents: &[Value],
) -> anyhow::Result<ReadLookups> {
    let mut read = BTreeMap::new();
    if rule.spec.lookups.is_empty() {
        return Ok(ReadLookups(read));
    }
    for parent in parents {
        let Ok(parent_ref) = ParentRef::read(parent) else {
            continue;
        };
        let context = plan::context::build(parent, &BTreeMap::new(), &rule.name, None);
        // A parent whose lookup names fail to render gets that error from its plan.
        let Ok(keys) = plan::lookups::keys(&set.renderer, rule, &parent_ref, &context) else {
            continue;
        };
        for key in keys.into_iter().filter_map(|(_, key)| key) {
            if read.contains_key(&key) {
                continue;
            }
            let namespace = Some(key.namespace.as_str()).filter(|ns| *ns != plan::lookups::ALL_NAMESPACES);
            let api = api_for(client, kinds, &key.api_version, &key.kind, namespace)?;
            let objects = if key.is_list() {
                let mut params = ListParams::default();
                if let Some(selector) = rule.lookup_selector(&key.api_version, &key.kind) {
                    params = params.labels(&selector);
                }
                list_values(client, &api, &params, &key.api_version, &key.kind)
                    .await
                    .with_context(|| format!("listing lookup {key}"))?
            } else {
                api.get_opt(&key.name)
                    .await
                    .with_context(|| format!("reading lookup {key}"))?
                    .and_then(|o| serde_json::to_value(o).ok())
                    .into_iter()
                    .collect()
            };
            read.insert(key, objects.into_iter().map(strip_managed_fields).collect());
        }
    }
    Ok(ReadLookups(read))
}
