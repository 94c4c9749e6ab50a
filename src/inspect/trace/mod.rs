//! `ruleop trace KIND/NAME`: the live tree of one parent, strictly read-only.
//!
//! It loads what the operator's caches would hold for the parent (the parent, its children by
//! the rule's labels, its lookups: [`crate::inspect::live`]), plans it with the same
//! [`plan::plan_with`], checks each existing child for drift with a server-side apply dry run
//! (`dryRun=All`, never persisted) where the live object does not already cover the rendering,
//! reads the parent's Events, and builds one [`model::Trace`] that [`render`] prints as a tree,
//! or that `-o json|yaml` serializes. Every request is a GET, LIST or a dry run.

pub(crate) mod model;
pub(crate) mod render;
#[cfg(test)]
mod testkit;

use std::collections::BTreeMap;
use std::io::IsTerminal as _;
use std::time::Duration;

use anyhow::Context as _;
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::Event;
use kube::Client;
use kube::api::{Api, ListParams};
use serde_json::Value;

use crate::apply::children::with_desired_hash;
use crate::apply::compare;
use crate::cache::discovery::Kinds;
use crate::engine::diagnostic::bounded;
use crate::engine::plan::{self, children::ObjectRef};
use crate::engine::rules::{Rule, RuleSet};
use crate::inspect::live::{self, dry_run};
use crate::offline::Sources;
use model::{Drift, Inputs, Trace};

/// How often `--watch` reads the cluster again.
pub(crate) const WATCH_INTERVAL: Duration = Duration::from_secs(2);

/// Dry runs sent at once.
const CONCURRENCY: usize = 8;

/// Parents listed when the name is not found.
const LISTED: usize = 20;

/// How `trace` prints the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Output {
    /// An indented tree.
    Tree,
    /// The Trace model as JSON.
    Json,
    /// The Trace model as YAML.
    Yaml,
}

/// What to trace and how to print it.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// `KIND/NAME` as given.
    pub target: String,
    /// The parent's namespace (default: the kubeconfig's).
    pub namespace: Option<String>,
    /// Redraw on change until Ctrl-C.
    pub watch: bool,
    /// Output format.
    pub output: Output,
}

/// `ruleop trace` as a command; returns the exit code (0 Ready, 1 not Ready, 2 error).
pub(crate) fn command(sources: &Sources, options: &Options) -> u8 {
    let Some(set) = crate::inspect::live::load_rules(sources, "rules") else {
        return 2;
    };
    let Some(runtime) = crate::inspect::live::runtime() else {
        return 2;
    };
    runtime.block_on(run(&set, options))
}

async fn run(set: &RuleSet, options: &Options) -> u8 {
    let colour = options.output == Output::Tree && std::io::stdout().is_terminal();
    let session = match Session::open(set, options).await {
        Ok(session) => session,
        Err(e) => {
            eprintln!("error: {e:#}");
            return 2;
        }
    };
    if !options.watch {
        return match session.trace().await {
            Ok(trace) => {
                print!("{}", show(&trace, options.output, colour));
                u8::from(!trace.ready)
            }
            Err(e) => {
                eprintln!("error: {e:#}");
                2
            }
        };
    }
    let mut last_shown = String::new();
    loop {
        let code;
        let shown = match session.trace().await {
            Ok(trace) => {
                code = u8::from(!trace.ready);
                show(&trace, options.output, colour)
            }
            Err(e) => {
                code = 2;
                format!("error: {e:#}\n")
            }
        };
        if shown != last_shown {
            if colour {
                // Clear the screen and home the cursor before the redraw.
                print!("\x1b[2J\x1b[H");
            }
            print!("{shown}");
            if !colour && options.output == Output::Tree {
                println!("---");
            }
            last_shown = shown;
        }
        tokio::select! {
            _ = tokio::signal::ctrl_c() => return code,
            () = tokio::time::sleep(WATCH_INTERVAL) => {}
        }
    }
}

fn show(trace: &Trace, output: Output, colour: bool) -> String {
    match output {
        Output::Tree => render::tree(trace, colour),
        Output::Json => match serde_json::to_string_pretty(trace) {
            Ok(json) => format!("{json}\n"),
            Err(e) => format!("error: {e}\n"),
        },
        Output::Yaml => match serde_json::to_value(trace) {
            Ok(value) => crate::engine::yaml::to_string(&value),
            Err(e) => format!("error: {e}\n"),
        },
    }
}

/// The parent to trace, resolved once: the client, its rule and where it lives.
pub(crate) struct Session<'a> {
    client: Client,
    kinds: Kinds,
    set: &'a RuleSet,
    rule: &'a Rule,
    namespace: Option<String>,
    name: String,
}

impl<'a> Session<'a> {
    async fn open(set: &'a RuleSet, options: &Options) -> anyhow::Result<Session<'a>> {
        let Some((kind, name)) = options
            .target
            .split_once('/')
            .filter(|(k, n)| !k.is_empty() && !n.is_empty())
        else {
            anyhow::bail!(
                "expected KIND/NAME (e.g. database/orders), got {:?}",
                bounded(&options.target, 253)
            );
        };
        let (client, kinds) = live::connect(set).await?;
        let rule = find_rule(set, &kinds, kind)?;
        let namespace = options
            .namespace
            .clone()
            .unwrap_or_else(|| client.default_namespace().to_owned());
        Session::of(client, kinds, set, rule, &namespace, name)
    }

    /// The session for the parent `name` of `rule` on a connected client (`namespace` is
    /// ignored for a cluster-scoped kind).
    pub(crate) fn of(
        client: Client,
        kinds: Kinds,
        set: &'a RuleSet,
        rule: &'a Rule,
        namespace: &str,
        name: &str,
    ) -> anyhow::Result<Session<'a>> {
        let served = kinds.resolved(&rule.spec.watch.api_version, &rule.spec.watch.kind)?;
        let namespace = served.namespaced.then(|| namespace.to_owned());
        Ok(Session {
            client,
            kinds,
            set,
            rule,
            namespace,
            name: name.to_owned(),
        })
    }

    /// Reads the cluster and builds the trace.
    pub(crate) async fn trace(&self) -> anyhow::Result<Trace> {
        let rule = self.rule;
        let watch = &rule.spec.watch;
        let api = live::api_for(
            &self.client,
            &self.kinds,
            &watch.api_version,
            &watch.kind,
            self.namespace.as_deref(),
        )?;
        let Some(parent) = api
            .get_opt(&self.name)
            .await
            .with_context(|| format!("reading {} {}", watch.kind, bounded(&self.name, 253)))?
        else {
            return Err(self.not_found().await);
        };
        let parent = live::strip_managed_fields(serde_json::to_value(parent)?);
        let uid = parent
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let children = live::list_children(&self.client, &self.kinds, rule, None, Some(&uid)).await?;
        let observed = live::children_of(&children, &parent);
        let lookups =
            live::read_lookups(&self.client, &self.kinds, self.set, rule, std::slice::from_ref(&parent)).await?;
        let stripped: Vec<Value> = observed.iter().cloned().map(live::strip_managed_fields).collect();
        let now = crate::records::clock::now_rfc3339();
        let planned = plan::plan_with(&self.set.renderer, rule, &parent, &stripped, &lookups, &now);
        let drift = match &planned {
            Ok(plan) => self.drift(plan, observed, &stripped).await,
            Err(_) => BTreeMap::new(),
        };
        let events = self.events(&parent, &uid).await;
        Ok(model::build(&Inputs {
            rule,
            parent: &parent,
            observed: &stripped,
            plan: planned.as_ref(),
            drift: &drift,
            events: &events,
        }))
    }

    /// The drift of every desired child that exists: none when the live object covers the
    /// rendering (the operator would send nothing), else what a dry-run apply would change.
    async fn drift(&self, plan: &plan::Plan, observed: &[Value], stripped: &[Value]) -> BTreeMap<ObjectRef, Drift> {
        // A loop and boxed futures, not a closure returning them: the console's handlers must
        // be Send, which the compiler cannot prove through such a closure's lifetimes.
        let mut covered = BTreeMap::new();
        let mut checks: Vec<futures::future::BoxFuture<'_, (ObjectRef, Drift)>> = Vec::new();
        for child in &plan.children {
            let Some(index) = observed
                .iter()
                .position(|o| ObjectRef::of(o).as_ref() == Some(&child.target))
            else {
                continue;
            };
            let desired = with_desired_hash(child);
            if compare::covers(&stripped[index], &desired) {
                covered.insert(child.target.clone(), Drift::Covered);
                continue;
            }
            let live = &observed[index];
            checks.push(Box::pin(async move {
                let outcome = dry_run::compare(&self.client, &self.kinds, &child.target, &desired, Some(live)).await;
                let drift = match outcome {
                    Ok(compared) => match compared.before {
                        Some(before) if before != compared.after => {
                            Drift::Compared(dry_run::unified(&before, &compared.after, "live", "rendered now"))
                        }
                        _ => Drift::Compared(String::new()),
                    },
                    Err(e) => Drift::Failed(e.to_string()),
                };
                (child.target.clone(), drift)
            }));
        }
        let compared: BTreeMap<ObjectRef, Drift> = futures::stream::iter(checks)
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
        covered.extend(compared);
        covered
    }

    /// The parent's Events (core v1, which also serves what events.k8s.io/v1 writes), by the
    /// uid of the object they regard. A failure to read them costs only the Events.
    async fn events(&self, parent: &Value, uid: &str) -> Vec<Value> {
        let namespace = parent
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .unwrap_or("default");
        let api: Api<Event> = Api::namespaced(self.client.clone(), namespace);
        let params = ListParams::default().fields(&format!("involvedObject.uid={uid}"));
        match api.list(&params).await {
            Ok(list) => list
                .items
                .into_iter()
                .filter_map(|e| serde_json::to_value(e).ok())
                .collect(),
            Err(e) => {
                eprintln!("warning: cannot read the parent's Events: {e}");
                Vec::new()
            }
        }
    }

    /// The error for a parent that does not exist, naming up to [`LISTED`] that do.
    async fn not_found(&self) -> anyhow::Error {
        let watch = &self.rule.spec.watch;
        let place = match &self.namespace {
            Some(ns) => format!("in namespace {:?}", bounded(ns, 253)),
            None => "(cluster-scoped)".to_owned(),
        };
        let existing = live::list_parents(&self.client, &self.kinds, self.rule, self.namespace.as_deref(), None)
            .await
            .unwrap_or_default();
        let names: Vec<String> = existing
            .iter()
            .filter_map(|p| p.pointer("/metadata/name").and_then(Value::as_str))
            .take(LISTED)
            .map(|n| crate::inspect::tenant_text::clean(&bounded(n, 253)))
            .collect();
        let listing = if names.is_empty() {
            format!("there is no {} {place}", watch.kind)
        } else {
            let more = existing.len().saturating_sub(LISTED);
            let more = if more > 0 {
                format!(" and {more} more")
            } else {
                String::new()
            };
            format!("existing {} objects {place}: {}{more}", watch.kind, names.join(", "))
        };
        NotFound(format!(
            "{} {:?} not found {place}; {listing}",
            watch.kind,
            crate::inspect::tenant_text::clean(&bounded(&self.name, 253))
        ))
        .into()
    }
}

/// The parent to trace does not exist (the console answers 404): what it says names the
/// parents that do.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct NotFound(String);

/// The rule watching `kind` (its kind, plural or singular, any case, optionally `.group`).
fn find_rule<'a>(set: &'a RuleSet, kinds: &Kinds, kind: &str) -> anyhow::Result<&'a Rule> {
    let wanted = kind.to_ascii_lowercase();
    let found = set.rules.iter().find(|rule| {
        let watch = &rule.spec.watch;
        let plural = kinds
            .get(&watch.api_version, &watch.kind)
            .map(|s| s.resource.plural.clone())
            .unwrap_or_default();
        kind_matches(&wanted, &watch.api_version, &watch.kind, &plural)
    });
    if let Some(rule) = found {
        return Ok(rule);
    }
    let watched: Vec<String> = set
        .rules
        .iter()
        .map(|r| format!("{} ({}, rule {})", r.spec.watch.kind, r.spec.watch.api_version, r.name))
        .collect();
    anyhow::bail!(
        "no rule watches {:?}; the rules watch: {}",
        crate::inspect::tenant_text::clean(&bounded(kind, 253)),
        if watched.is_empty() {
            "nothing".to_owned()
        } else {
            watched.join(", ")
        }
    )
}

/// Whether `wanted` (lowercase) names the kind: `database`, `databases`, `Database`,
/// `databases.myorg.io` all name `myorg.io/v1 Database`.
fn kind_matches(wanted: &str, api_version: &str, kind: &str, plural: &str) -> bool {
    let group = api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or_default();
    let (name, in_group) = match wanted.split_once('.') {
        Some((name, rest)) => (
            name,
            rest == group || rest.ends_with(&format!(".{group}")) && !group.is_empty(),
        ),
        None => (wanted, true),
    };
    let kind = kind.to_ascii_lowercase();
    in_group && (name == kind || name == plural || (!plural.is_empty() && name == format!("{kind}s")))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_is_named_by_kind_plural_or_qualified_plural() {
        for name in ["database", "databases", "databases.myorg.io", "database.v1.myorg.io"] {
            assert!(kind_matches(name, "myorg.io/v1", "Database", "databases"), "{name}");
        }
        assert!(!kind_matches(
            "databases.other.io",
            "myorg.io/v1",
            "Database",
            "databases"
        ));
        assert!(!kind_matches("service", "myorg.io/v1", "Database", "databases"));
        assert!(kind_matches("configmap", "v1", "ConfigMap", "configmaps"));
    }
}
