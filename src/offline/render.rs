//! `ruleop render`: one parent planned from files, printed as YAML (children as documents,
//! the rest as comments) or as one JSON object.

use std::path::Path;

use serde_json::{Value, json};

use crate::engine::plan::children::ChildUpdate;
use crate::engine::plan::foreach::ANNOTATION_ITEM_KEY;
use crate::engine::plan::{self, Plan};
use crate::engine::rules::{Rule, RuleSet};
use crate::engine::yaml;
use crate::offline::parent::{Admission, plan_offline, read_observed, read_parent};
use crate::offline::{CommandError, SchemaSources, Sources, load_checked};

/// How `render` prints the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutputFormat {
    /// Children as YAML documents; everything else as `#` comments.
    Yaml,
    /// The whole plan as one JSON object.
    Json,
}

/// What `ruleop render` renders and how it prints it.
#[derive(Debug, Clone, Copy)]
pub struct RenderInputs<'a> {
    /// The parent object (YAML).
    pub file: &'a Path,
    /// A directory of observed children.
    pub observed: Option<&'a Path>,
    /// The output format.
    pub output: OutputFormat,
    /// The time stamped on changed conditions.
    pub now: &'a str,
}

/// `ruleop render`: the printed plan.
pub fn render(sources: &Sources, schemas: &SchemaSources, inputs: &RenderInputs<'_>) -> Result<String, CommandError> {
    let (set, _) = load_checked(sources, schemas)?;
    render_with(&set, inputs)
}

/// `ruleop render` of the parent in `inputs` under `set`.
pub(crate) fn render_with(set: &RuleSet, inputs: &RenderInputs<'_>) -> Result<String, CommandError> {
    let RenderInputs {
        file,
        observed: observed_dir,
        output,
        now,
    } = *inputs;
    let parent = read_parent(file)?;
    let files = match observed_dir {
        Some(dir) => read_observed(dir)?,
        None => Vec::new(),
    };
    let planned = plan_offline(set, parent, files, file, now, Admission::ByCrd)?;
    let plan = planned.result.map_err(|e| {
        CommandError(format!(
            "{}: error: {e}\n  the parent would get Ready=False (reason {}); nothing would be applied",
            file.display(),
            e.reason()
        ))
    })?;
    let (rule, parent, notes) = (planned.rule, planned.parent, planned.notes);
    Ok(match output {
        OutputFormat::Json => {
            let mut out = json!({"rule": rule.name, "notes": notes, "plan": plan});
            if let Some(rollout) = &rule.rollout {
                out["rollout"] = json!(rollout.describe());
            }
            serde_json::to_string_pretty(&out).unwrap_or_default()
        }
        OutputFormat::Yaml => print_yaml(rule, &parent, &notes, &plan),
    })
}

fn print_yaml(rule: &Rule, parent: &Value, notes: &[String], plan: &Plan) -> String {
    let name = parent
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = parent.get("kind").and_then(Value::as_str).unwrap_or_default();
    let mut out = format!("# ruleop render: rule {:?}, parent {kind} {name}\n", rule.name);
    if let Some(rollout) = &rule.rollout {
        out.push_str(&format!("# rollout: {}\n", rollout.describe()));
    }
    for note in notes {
        out.push_str(&format!("# note: {note}\n"));
    }
    if plan.paused {
        out.push_str(&format!(
            "# paused ({}: \"true\"): nothing would be written but the Paused condition; actions are held\n",
            crate::engine::plan::pause::ANNOTATION_PAUSED
        ));
    }
    if !plan.lookups.is_empty() {
        out.push_str(&format!("# === lookups ({}) ===\n", plan.lookups.len()));
        for read in &plan.lookups {
            match (&read.target, read.found) {
                (Some(target), _) if read.count.is_some() => out.push_str(&format!(
                    "# {}: {target}: list of {}\n",
                    read.id,
                    read.count.unwrap_or_default()
                )),
                (Some(target), true) => out.push_str(&format!("# {}: {target}: found\n", read.id)),
                (Some(target), false) => out.push_str(&format!("# {}: {target}: absent (none)\n", read.id)),
                (None, _) => out.push_str(&format!("# {}: name is empty: none\n", read.id)),
            }
        }
    }
    out.push_str(&format!("# === children ({}) ===\n", plan.children.len()));
    for child in &plan.children {
        let item = child
            .object
            .pointer(&format!(
                "/metadata/annotations/{}",
                ANNOTATION_ITEM_KEY.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            .map(|key| format!(" item {key:?}"))
            .unwrap_or_default();
        let update = match child.update {
            ChildUpdate::Apply => "",
            ChildUpdate::Keep => " (updateStrategy: the live object is kept as it is)",
            ChildUpdate::Recreate => " (updateStrategy: the live object is deleted; created again once it is gone)",
            ChildUpdate::Wait => " (scaling: Ordered; not created until every item before it exists and is ready)",
        };
        out.push_str(&format!(
            "---\n# child {:?}{item}: {}{update}\n",
            child.id, child.target
        ));
        out.push_str(&yaml::to_string(&child.object));
    }
    if !plan.waiting.is_empty() {
        out.push_str(&format!("# === waiting ({}) ===\n", plan.waiting.len()));
        for wait in &plan.waiting {
            out.push_str(&format!(
                "# {}: waits for {:?}: {} (not applied, not pruned)\n",
                wait.id, wait.on, wait.reason
            ));
        }
    }
    out.push_str(&format!("# === prune ({}) ===\n", plan.prune.len()));
    for target in &plan.prune {
        out.push_str(&format!("# delete {target}\n"));
    }
    for held in &plan.held_removals {
        out.push_str(&format!("# keep {} for now: {}\n", held.target, held.reason));
    }
    if !plan.release.is_empty() {
        out.push_str(&format!(
            "# === release ({}, deletionPolicy: Orphan: left in place, no longer ruleop's) ===\n",
            plan.release.len()
        ));
        for release in &plan.release {
            out.push_str(&format!("# release {} with the merge patch\n", release.target));
            out.push_str(&commented(&yaml::to_string(&release.patch), "#   "));
        }
    }
    out.push_str(&format!("# === actions ({}) ===\n", plan.actions.len()));
    for decision in &plan.actions {
        let verdict = if decision.run { "RUN" } else { "skip" };
        let mut notes = String::new();
        if decision.skipped_slots > 0 {
            notes.push_str(&format!(" ({} earlier slot(s) skipped)", decision.skipped_slots));
        }
        if let Some(ms) = decision.retry_in_ms {
            notes.push_str(&format!(" (looking again in {ms} ms)"));
        }
        out.push_str(&format!("# {}: {verdict}: {}{notes}\n", decision.id, decision.reason));
        if let Some(effect) = &decision.effect {
            let printed = match effect {
                plan::actions::Effect::Create(object) => yaml::to_string(object),
                plan::actions::Effect::Http(request) => {
                    let mut shown = json!(request);
                    shown["egress"] = json!(egress_verdict(request));
                    yaml::to_string(&shown)
                }
            };
            out.push_str(&commented(&printed, "#   "));
        }
    }
    print_lifecycle(&mut out, plan);
    if let Some(apply) = &plan.parent_metadata {
        out.push_str("# === parent metadata (server-side apply onto the parent) ===\n");
        out.push_str(&commented(&yaml::to_string(&apply["metadata"]), "# "));
    }
    out.push_str("# === status patch ===\n");
    for problem in &plan.status_problems {
        out.push_str(&commented(&format!("warning: {problem}"), "# "));
    }
    match &plan.status_patch {
        Some(patch) => out.push_str(&commented(&yaml::to_string(patch), "# ")),
        None if !rule.writes_status() => out.push_str(&format!(
            "# (none: the rule writes no status into {}, see status.write)\n",
            rule.spec.watch.kind
        )),
        None => out.push_str("# (none: status already up to date)\n"),
    }
    if rule.rollout.is_some() && rule.revision.is_none() {
        out.push_str(&format!(
            "# status.{}: the number of the revision in force, with the next write that changes this parent \
             (ruleop run numbers revisions; see ruleop rollout history, or render --revision)\n",
            plan::REVISION_FIELD
        ));
    }
    for warning in &plan.warnings {
        let line = format!(
            "warning event {} ({} turned False): {}",
            warning.reason, warning.type_, warning.message
        );
        out.push_str(&commented(&line, "# "));
    }
    out
}

/// The finalizer step and, for a parent being deleted, what holds the deletion.
fn print_lifecycle(out: &mut String, plan: &Plan) {
    use plan::deletion::{FINALIZER, FinalizerStep};
    match plan.finalizer {
        FinalizerStep::Unchanged => {}
        FinalizerStep::Add => out.push_str(&format!(
            "# === finalizer {FINALIZER}: add (before any child is applied) ===\n"
        )),
        FinalizerStep::Remove => out.push_str(&format!(
            "# === finalizer {FINALIZER}: remove (after the deletes above): the deletion completes ===\n"
        )),
    }
    if let Some(deletion) = &plan.deletion {
        out.push_str("# === deletion in progress ===\n");
        for line in &deletion.waiting {
            out.push_str(&format!("# waiting: {line}\n"));
        }
        for line in deletion.timed_out.iter().chain(&deletion.finalize_timed_out) {
            out.push_str(&format!("# timed out (Warning Event): {line}\n"));
        }
        if let Some(ms) = deletion.recheck_in_ms {
            out.push_str(&format!("# looking again in {ms} ms\n"));
        }
    }
}

fn commented(text: &str, prefix: &str) -> String {
    text.lines().map(|l| format!("{prefix}{l}\n")).collect()
}

/// What the egress policy says of a rendered request before resolving its host: the sender
/// then also checks every address the host resolves to.
fn egress_verdict(request: &plan::actions::HttpRequest) -> String {
    let checked = crate::engine::egress::parse_allowed(&request.allowed_hosts)
        .and_then(|allowed| crate::engine::egress::check_url(&request.url, &allowed));
    match checked {
        Ok(target) => format!("allowed to {} (its addresses are checked when sent)", target.origin),
        Err(denied) => format!("EgressDenied: {denied}"),
    }
}
