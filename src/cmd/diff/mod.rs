//! `ruleop diff`: what a proposed rule set would change in the live cluster, without writing.
//!
//! For every parent of every proposed rule it plans as the operator would (the same
//! [`plan::plan_with`], on live parents, children and looked-up objects), then asks the API
//! server for a server-side apply **dry run** of each child the operator would apply, so
//! defaulting, admission and other managers' fields are accounted for. The diff shows only the
//! fields ruleop manages (from the dry run's and the live object's `managedFields`). Nothing is
//! persisted: every request is a read or carries `dryRun=All`.

pub mod fields;

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use futures::StreamExt as _;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};
use serde_json::{Map, Value};

use crate::apply::children::with_desired_hash;
use crate::apply::{FIELD_MANAGER, api_error, compare};
use crate::cache::discovery::Kinds;
use crate::engine::plan::children::ANNOTATION_DESIRED_HASH;
use crate::engine::plan::children::{DesiredChild, ObjectRef};
use crate::engine::plan::context::{LABEL_PARENT_UID, LABEL_RULE, ParentRef};
use crate::engine::plan::deletion::{FINALIZER, FinalizerStep};
use crate::engine::plan::lookups::{LookupKey, LookupSource};
use crate::engine::plan::{self, Plan, actions::Effect};
use crate::engine::rules::{Rule, RuleSet};
use crate::engine::yaml;

/// Parents diffed at once (each is a few requests at most).
const CONCURRENCY: usize = 8;

/// Which parents to look at and when "now" is.
#[derive(Debug, Clone)]
pub struct Options {
    /// Only parents in this namespace.
    pub namespace: Option<String>,
    /// Only parents matching this label selector (besides the rule's own).
    pub selector: Option<String>,
    /// The time a changed condition would be stamped with (RFC 3339).
    pub now: String,
}

/// The write requests the proposed rules would cause (Events not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Writes {
    /// Server-side applies of children that exist and would change.
    pub updates: usize,
    /// Server-side applies creating children.
    pub creates: usize,
    /// Deletes of children no longer desired.
    pub prunes: usize,
    /// Action runs.
    pub action_runs: usize,
    /// Their writes: a `create` run is the object and its record (the name is the lock); an
    /// `http` run also records its intent first.
    pub action_writes: usize,
    /// Status patches not folded into an action's completion record.
    pub status: usize,
    /// Patches adding or removing the parent's finalizer.
    pub finalizer: usize,
}

impl Writes {
    /// Every write request.
    pub fn total(&self) -> usize {
        self.updates + self.creates + self.prunes + self.action_writes + self.status + self.finalizer
    }

    fn add(&mut self, other: Writes) {
        self.updates += other.updates;
        self.creates += other.creates;
        self.prunes += other.prunes;
        self.action_runs += other.action_runs;
        self.action_writes += other.action_writes;
        self.status += other.status;
        self.finalizer += other.finalizer;
    }
}

/// What `ruleop diff` found.
#[derive(Debug, Clone, Default)]
pub struct Report {
    /// The printed diff of every affected parent (empty when nothing would change).
    pub text: String,
    /// Parents that would change.
    pub affected: usize,
    /// Parents that would not.
    pub unchanged: usize,
    /// The writes it would take.
    pub writes: Writes,
}

impl Report {
    /// The summary line.
    pub fn summary(&self) -> String {
        let w = &self.writes;
        format!(
            "{} parent(s) would change, {} unchanged; {} write(s): {} child update(s), {} create(s), \
             {} prune(s), {} action run(s) ({} writes), {} status write(s), {} finalizer write(s) \
             (Events not counted)",
            self.affected,
            self.unchanged,
            w.total(),
            w.updates,
            w.creates,
            w.prunes,
            w.action_runs,
            w.action_writes,
            w.status,
            w.finalizer
        )
    }
}

/// `ruleop diff` as a command: prints the diff on stdout and the summary on stderr; returns
/// the exit code (0 no change, 1 changes, 2 error).
pub fn command(
    sources: crate::cmd::cli::Sources,
    namespace: Option<String>,
    selector: Option<String>,
    now: Option<String>,
) -> u8 {
    let set = match crate::engine::rules::load::load(&sources.rules, &sources.templates) {
        Ok(set) => set,
        Err(diagnostics) => {
            eprintln!("{diagnostics}\nerror: the proposed rules are invalid");
            return 2;
        }
    };
    let options = Options {
        namespace,
        selector,
        now: now.unwrap_or_else(crate::runtime::clock::now_rfc3339),
    };
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            return 2;
        }
    };
    match runtime.block_on(diff(&set, &options)) {
        Ok(report) => {
            print!("{}", report.text);
            eprintln!("{}", report.summary());
            u8::from(report.affected > 0)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    }
}

/// Diffs every parent of every rule of `set` against the cluster of the kubeconfig.
pub async fn diff(set: &RuleSet, options: &Options) -> anyhow::Result<Report> {
    let config = crate::apply::client::cluster_config()
        .await
        .context("cannot connect to the cluster (kubeconfig or in-cluster config)")?;
    let client = Client::try_from(config).context("cannot build a client for the cluster")?;
    let mut kinds = Kinds::default();
    if let Some(unknown) = kinds.resolve(&client, set).await.into_iter().next() {
        return Err(unknown.into());
    }
    let mut report = Report::default();
    for rule in &set.rules {
        let parents = list_parents(&client, &kinds, rule, options).await?;
        let children = list_children(&client, &kinds, rule, options.namespace.as_deref()).await?;
        let lookups = read_lookups(&client, &kinds, set, rule, &parents).await?;
        let context = ParentContext {
            client: &client,
            kinds: &kinds,
            set,
            rule,
            lookups: &lookups,
            now: &options.now,
        };
        let diffs: Vec<ParentDiff> = futures::stream::iter(parents.iter().map(|parent| {
            let uid = parent
                .pointer("/metadata/uid")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let observed = children.get(uid).map(Vec::as_slice).unwrap_or_default();
            context.diff_parent(parent, observed)
        }))
        .buffered(CONCURRENCY)
        .collect()
        .await;
        for parent in diffs {
            if parent.text.is_empty() {
                report.unchanged += 1;
            } else {
                report.affected += 1;
                report.text.push_str(&parent.text);
            }
            report.writes.add(parent.writes);
        }
    }
    Ok(report)
}

fn strip_managed_fields(mut object: Value) -> Value {
    if let Some(metadata) = object.get_mut("metadata").and_then(Value::as_object_mut) {
        metadata.remove("managedFields");
    }
    object
}

fn api_for(
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
async fn list_values(
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
async fn list_parents(client: &Client, kinds: &Kinds, rule: &Rule, options: &Options) -> anyhow::Result<Vec<Value>> {
    let watch = &rule.spec.watch;
    let selector: Vec<&str> = [watch.label_selector.as_deref(), options.selector.as_deref()]
        .into_iter()
        .flatten()
        .filter(|s| !s.trim().is_empty())
        .collect();
    let params = ListParams::default().labels(&selector.join(","));
    let api = api_for(
        client,
        kinds,
        &watch.api_version,
        &watch.kind,
        options.namespace.as_deref(),
    )?;
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

/// The rule's live children (with their managedFields) by parent UID.
async fn list_children(
    client: &Client,
    kinds: &Kinds,
    rule: &Rule,
    namespace: Option<&str>,
) -> anyhow::Result<HashMap<String, Vec<Value>>> {
    let mut kinds_of_children: Vec<(&str, &str)> = rule
        .spec
        .children
        .iter()
        .map(|c| (c.api_version.as_str(), c.kind.as_str()))
        .collect();
    kinds_of_children.sort();
    kinds_of_children.dedup();
    let params = ListParams::default().labels(&format!("{LABEL_RULE}={}", rule.name));
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
struct ReadLookups(BTreeMap<LookupKey, Vec<Value>>);

impl LookupSource for ReadLookups {
    fn get(&self, key: &LookupKey) -> Option<Value> {
        self.0.get(key).and_then(|objects| objects.first().cloned())
    }

    fn list(&self, key: &LookupKey) -> Vec<Value> {
        self.0.get(key).cloned().unwrap_or_default()
    }
}

async fn read_lookups(
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

/// One parent's part of the report.
struct ParentDiff {
    /// Empty when nothing would change.
    text: String,
    writes: Writes,
}

/// What diffing a parent of one rule needs.
struct ParentContext<'a> {
    client: &'a Client,
    kinds: &'a Kinds,
    set: &'a RuleSet,
    rule: &'a Rule,
    lookups: &'a ReadLookups,
    now: &'a str,
}

impl ParentContext<'_> {
    async fn diff_parent(&self, parent: &Value, observed: &[Value]) -> ParentDiff {
        let stripped: Vec<Value> = observed.iter().cloned().map(strip_managed_fields).collect();
        let mut out = String::new();
        let mut writes = Writes::default();
        match plan::plan_with(&self.set.renderer, self.rule, parent, &stripped, self.lookups, self.now) {
            Ok(plan) => {
                self.diff_plan(parent, observed, &stripped, &plan, &mut out, &mut writes)
                    .await
            }
            Err(e) => {
                let patch = plan::failure_status_patch(parent, e.reason(), &e.to_string(), self.now);
                if let Some(patch) = patch {
                    out.push_str(&format!(
                        "! the plan fails (reason {}): {e}\n  nothing would be applied\n",
                        e.reason()
                    ));
                    out.push_str(&status_diff(parent, &patch));
                    writes.status += 1;
                }
            }
        }
        if !out.is_empty() {
            out = format!("{}{out}", header(self.rule, parent));
        }
        ParentDiff { text: out, writes }
    }

    async fn diff_plan(
        &self,
        parent: &Value,
        observed: &[Value],
        stripped: &[Value],
        plan: &Plan,
        out: &mut String,
        writes: &mut Writes,
    ) {
        for child in &plan.children {
            let index = observed
                .iter()
                .position(|o| ObjectRef::of(o).as_ref() == Some(&child.target));
            let live = index.map(|i| (&observed[i], &stripped[i]));
            let desired = with_desired_hash(child);
            if live.is_some_and(|(_, bare)| compare::covers(bare, &desired)) {
                continue;
            }
            if live.is_some() {
                writes.updates += 1;
            } else {
                writes.creates += 1;
            }
            out.push_str(&self.child_diff(child, &desired, live.map(|(full, _)| full)).await);
        }
        for target in &plan.prune {
            writes.prunes += 1;
            out.push_str(&format!("- {target} would be pruned (deleted)\n"));
        }
        match plan.finalizer {
            FinalizerStep::Add => {
                writes.finalizer += 1;
                out.push_str(&format!("+ finalizer {FINALIZER} would be added\n"));
            }
            FinalizerStep::Remove => {
                writes.finalizer += 1;
                out.push_str(&format!(
                    "- finalizer {FINALIZER} would be removed: the deletion completes\n"
                ));
            }
            FinalizerStep::Unchanged => {}
        }
        let mut runs = 0;
        for decision in plan.actions.iter().filter(|a| a.run) {
            runs += 1;
            writes.action_writes += match &decision.effect {
                Some(Effect::Http(_)) => 3,
                _ => 2,
            };
            let effect = match &decision.effect {
                Some(Effect::Create(object)) => ObjectRef::of(object)
                    .map(|target| format!(": creates {target}"))
                    .unwrap_or_default(),
                Some(Effect::Http(request)) => format!(": {} {}", request.method, request.url),
                None => String::new(),
            };
            out.push_str(&format!(
                "* action {} would run ({}){effect}\n",
                decision.id, decision.reason
            ));
        }
        writes.action_runs += runs;
        if let Some(patch) = &plan.status_patch {
            // The last action's completion record carries the plan's status.
            if runs == 0 {
                writes.status += 1;
            }
            out.push_str(&status_diff(parent, patch));
        }
    }

    /// The unified diff of one child's managed fields, live vs the dry run's result.
    async fn child_diff(&self, child: &DesiredChild, desired: &Value, live: Option<&Value>) -> String {
        let target = &child.target;
        let params = PatchParams::apply(FIELD_MANAGER).force().validation_strict().dry_run();
        let api = match api_for(
            self.client,
            self.kinds,
            &target.api_version,
            &target.kind,
            Some(&target.namespace),
        ) {
            Ok(api) => api,
            Err(e) => return format!("! {target}: {e:#}\n"),
        };
        let result = match api.patch(&target.name, &params, &Patch::Apply(desired)).await {
            Ok(object) => serde_json::to_value(object).unwrap_or_default(),
            Err(e) => {
                return format!(
                    "! {target} would be refused by the API server: {}\n",
                    api_error::describe(&e)
                );
            }
        };
        let mut owned = fields::owned_by(&result, FIELD_MANAGER);
        if let Some(live) = live {
            fields::merge(&mut owned, &fields::owned_by(live, FIELD_MANAGER));
        }
        let shown = |object: &Value| {
            let mut projected = fields::project(object, &owned);
            if let Some(Value::Object(annotations)) = projected.pointer_mut("/metadata/annotations") {
                annotations.remove(ANNOTATION_DESIRED_HASH);
                if annotations.is_empty()
                    && let Some(Value::Object(metadata)) = projected.get_mut("metadata")
                {
                    metadata.remove("annotations");
                }
            }
            yaml::to_string(&sorted(projected))
        };
        let after = shown(&result);
        match live {
            None => unified("", &after, "/dev/null", &format!("{target} (would be created)")),
            Some(live) => {
                let before = shown(live);
                if before == after {
                    format!("~ {target} would be re-applied with no change to its fields (its desired-hash changes)\n")
                } else {
                    unified(
                        &before,
                        &after,
                        &format!("{target} (live)"),
                        &format!("{target} (proposed)"),
                    )
                }
            }
        }
    }
}

/// `value` with every map's keys in order: the live object (JSON as stored) and the dry run's
/// result (decoded through typed metadata) list the same fields in different orders.
fn sorted(value: Value) -> Value {
    match value {
        Value::Object(map) => {
            let mut entries: Vec<(String, Value)> = map.into_iter().collect();
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().map(|(k, v)| (k, sorted(v))).collect())
        }
        Value::Array(items) => Value::Array(items.into_iter().map(sorted).collect()),
        other => other,
    }
}

fn header(rule: &Rule, parent: &Value) -> String {
    let text = |p: &str| parent.pointer(p).and_then(Value::as_str).unwrap_or_default();
    format!(
        "=== {} {}/{} (rule {})\n",
        text("/kind"),
        text("/metadata/namespace"),
        text("/metadata/name"),
        rule.name
    )
}

fn unified(before: &str, after: &str, from: &str, to: &str) -> String {
    similar::TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(3)
        .header(from, to)
        .to_string()
}

/// The status fields a patch changes, before and after, as a unified diff.
fn status_diff(parent: &Value, patch: &Value) -> String {
    let Some(Value::Object(changes)) = patch.get("status") else {
        return String::new();
    };
    let current = parent
        .get("status")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let mut before = Map::new();
    let mut after = Map::new();
    for (key, value) in changes {
        if let Some(old) = current.get(key) {
            before.insert(key.clone(), old.clone());
        }
        if !value.is_null() {
            after.insert(key.clone(), value.clone());
        }
    }
    let show = |map: Map<String, Value>| {
        if map.is_empty() {
            String::new()
        } else {
            yaml::to_string(&Value::Object(map))
        }
    };
    unified(&show(before), &show(after), "status (live)", "status (proposed)")
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn status_diff_shows_only_the_fields_the_patch_touches() {
        let parent = json!({"status": {"endpoint": "a", "readyReplicas": 2, "untouched": true}});
        let patch = json!({"status": {"endpoint": "b", "readyReplicas": null}});
        assert_eq!(
            status_diff(&parent, &patch),
            "--- status (live)\n+++ status (proposed)\n@@ -1,2 +1 @@\n-endpoint: a\n-readyReplicas: 2\n+endpoint: b\n"
        );
        assert_eq!(status_diff(&parent, &json!({"metadata": {}})), "");
    }

    #[test]
    fn an_action_run_counts_its_effect_and_record_and_an_http_run_its_intent_too() {
        let writes = Writes {
            updates: 1,
            creates: 2,
            prunes: 1,
            action_runs: 2,
            action_writes: 2 + 3,
            status: 1,
            finalizer: 1,
        };
        assert_eq!(writes.total(), 11);
    }
}
