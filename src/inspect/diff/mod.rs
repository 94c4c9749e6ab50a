//! `ruleop diff`: what a proposed rule set would change in the live cluster, without writing.
//!
//! For every parent of every proposed rule it plans as the operator would (the same
//! [`plan::plan_with`], on live parents, children and looked-up objects), then asks the API
//! server for a server-side apply **dry run** of each child the operator would apply, so
//! defaulting, admission and other managers' fields are accounted for. The diff shows only the
//! fields ruleop manages (from the dry run's and the live object's `managedFields`). Nothing is
//! persisted: every request is a read or carries `dryRun=All`.

use futures::StreamExt as _;
use kube::Client;
use serde_json::{Map, Value};

use crate::apply::children::with_desired_hash;
use crate::apply::compare;
use crate::cache::discovery::Kinds;
use crate::engine::plan::children::{DesiredChild, ObjectRef};
use crate::engine::plan::deletion::{FINALIZER, FinalizerStep};
use crate::engine::plan::{self, Plan, actions::Effect};
use crate::engine::rules::{Rule, RuleSet};
use crate::engine::yaml;
use crate::inspect::live::dry_run::{self, DryRunError, unified};
use crate::inspect::live::{self, ReadLookups, strip_managed_fields};

/// Parents diffed at once (each is a few requests at most).
const CONCURRENCY: usize = 8;

/// Which parents to look at and when "now" is.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Only parents in this namespace.
    pub namespace: Option<String>,
    /// Only parents matching this label selector (besides the rule's own).
    pub selector: Option<String>,
    /// The time a changed condition would be stamped with (RFC 3339).
    pub now: String,
}

/// The write requests the proposed rules would cause (Events not counted).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Writes {
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
    pub(crate) fn total(&self) -> usize {
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
pub(crate) struct Report {
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
    pub(crate) fn summary(&self) -> String {
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

/// A kept revision to diff instead of the files (`--revision N --rule RULE`).
#[derive(Debug, Clone)]
pub(crate) struct Kept {
    /// The rule.
    pub rule: String,
    /// Its kept revision.
    pub revision: u64,
    /// Where the revisions are kept.
    pub status_namespace: String,
}

/// `ruleop diff` as a command: prints the diff on stdout and the summary on stderr; returns
/// the exit code (0 no change, 1 changes, 2 error).
pub(crate) fn command(
    sources: crate::offline::Sources,
    namespace: Option<String>,
    selector: Option<String>,
    now: Option<String>,
    kept: Option<Kept>,
) -> u8 {
    let Some(runtime) = crate::inspect::live::runtime() else {
        return 2;
    };
    let set = match &kept {
        None => crate::inspect::live::load_rules(&sources, "proposed rules"),
        Some(kept) => runtime
            .block_on(crate::inspect::rollout::kept_set(
                &kept.rule,
                kept.revision,
                &kept.status_namespace,
            ))
            .map_err(|e| eprintln!("error: {e:#}"))
            .ok(),
    };
    let Some(set) = set else {
        return 2;
    };
    let options = Options {
        namespace,
        selector,
        now: now.unwrap_or_else(crate::records::clock::now_rfc3339),
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
pub(crate) async fn diff(set: &RuleSet, options: &Options) -> anyhow::Result<Report> {
    let (client, kinds) = live::connect(set).await?;
    let mut report = Report::default();
    for rule in &set.rules {
        let namespace = options.namespace.as_deref();
        let parents = live::list_parents(&client, &kinds, rule, namespace, options.selector.as_deref()).await?;
        let children = live::list_children(&client, &kinds, rule, namespace, None).await?;
        let lookups = live::read_lookups(&client, &kinds, set, rule, &parents).await?;
        let context = ParentContext {
            client: &client,
            kinds: &kinds,
            set,
            rule,
            lookups: &lookups,
            now: &options.now,
        };
        let diffs: Vec<ParentDiff> = futures::stream::iter(
            parents
                .iter()
                .map(|parent| context.diff_parent(parent, live::children_of(&children, parent))),
        )
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
        let compared = match dry_run::compare(self.client, self.kinds, target, desired, live).await {
            Ok(compared) => compared,
            Err(e @ DryRunError::Kind(_)) => return format!("! {target}: {e}\n"),
            Err(e @ DryRunError::Refused(_)) => return format!("! {target} {e}\n"),
        };
        match compared.before {
            None => unified(
                "",
                &compared.after,
                "/dev/null",
                &format!("{target} (would be created)"),
            ),
            Some(before) if before == compared.after => {
                format!("~ {target} would be re-applied with no change to its fields (its desired-hash changes)\n")
            }
            Some(before) => unified(
                &before,
                &compared.after,
                &format!("{target} (live)"),
                &format!("{target} (proposed)"),
            ),
        }
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
