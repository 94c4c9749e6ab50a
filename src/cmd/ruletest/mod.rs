//! `ruleop test`: rule tests as data. Each `RuleTest` case plans one parent offline (the same
//! path as `ruleop render`) and checks the plan against its expectations; the report has one
//! PASS/FAIL line per case with its file:line, the first mismatch of each failed expectation,
//! a summary line, and optionally JUnit XML.

pub(crate) mod junit;
pub(crate) mod matcher;
pub(crate) mod model;

use std::path::{Path, PathBuf};
use std::time::Instant;

use serde_json::{Map, Value};

use crate::cmd::offline::{self, CommandError};
use crate::engine::plan::children::{ChildUpdate, ObjectRef as ChildRef};
use crate::engine::plan::{Plan, PlanError};
use crate::engine::rules::RuleSet;
use crate::engine::rules::model::RULE_API_VERSION;
use crate::engine::yaml;
use matcher::{Mismatch, show, subset};
use model::{Expectations, RULE_TEST_KIND, RuleTestDocument, TestCase};

/// The time a case plans at unless it sets `now`: fixed, so results never depend on the clock.
pub(crate) const DEFAULT_NOW: &str = "2026-01-01T00:00:00Z";

/// The outcome of one case.
#[derive(Debug, Clone)]
pub(crate) struct CaseResult {
    /// The test file.
    pub file: PathBuf,
    /// The line of the case's `name` (or of the problem, for a file that cannot be read).
    pub line: u64,
    /// The `RuleTest`'s `metadata.name`.
    pub suite: String,
    /// The case's name.
    pub name: String,
    /// Each failed expectation, with its first mismatch; empty when the case passed.
    pub failures: Vec<String>,
    /// How long the case took.
    pub seconds: f64,
}

impl CaseResult {
    /// Whether every expectation held.
    pub(crate) fn passed(&self) -> bool {
        self.failures.is_empty()
    }
}

/// Every case's outcome, in file and case order.
#[derive(Debug, Clone, Default)]
pub(crate) struct Report {
    /// The cases.
    pub cases: Vec<CaseResult>,
}

impl Report {
    /// How many cases failed.
    pub(crate) fn failed(&self) -> usize {
        self.cases.iter().filter(|c| !c.passed()).count()
    }

    /// The printed report: a line per case, the mismatches under a failure, the summary.
    pub(crate) fn text(&self) -> String {
        let mut out = String::new();
        for case in &self.cases {
            let verdict = if case.passed() { "PASS" } else { "FAIL" };
            out.push_str(&format!(
                "{verdict} {}:{}: {}\n",
                case.file.display(),
                case.line,
                case.name
            ));
            for failure in &case.failures {
                for (i, line) in failure.lines().enumerate() {
                    out.push_str(if i == 0 { "    " } else { "      " });
                    out.push_str(line);
                    out.push('\n');
                }
            }
        }
        let failed = self.failed();
        out.push_str(&format!("{} passed, {failed} failed\n", self.cases.len() - failed));
        out
    }
}

/// Runs the tests in `paths` (files, or directories searched recursively for YAML files holding
/// `RuleTest` documents; default: `tests/` beside the rules directory) against the rules.
/// An error means nothing could be run (invalid rules, no tests found).
pub(crate) fn run(set: &RuleSet, paths: &[PathBuf], default_dir: &Path) -> Result<Report, CommandError> {
    let files = discover(paths, default_dir)?;
    let mut report = Report::default();
    for file in files {
        run_file(set, &file, &mut report);
    }
    if report.cases.is_empty() {
        return Err(CommandError(format!(
            "error: no RuleTest cases found in {}",
            describe_paths(paths, default_dir)
        )));
    }
    Ok(report)
}

fn describe_paths(paths: &[PathBuf], default_dir: &Path) -> String {
    if paths.is_empty() {
        return default_dir.display().to_string();
    }
    paths
        .iter()
        .map(|p| p.display().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// The test files: named files as they are; under directories, YAML files mentioning `RuleTest`
/// (so a directory may also hold other YAML, such as parents the tests read).
fn discover(paths: &[PathBuf], default_dir: &Path) -> Result<Vec<PathBuf>, CommandError> {
    let defaulted = [default_dir.to_path_buf()];
    let paths = if paths.is_empty() { &defaulted[..] } else { paths };
    let mut files = Vec::new();
    for path in paths {
        let meta = std::fs::metadata(path)
            .map_err(|e| CommandError(format!("{}: error: cannot read: {e}", path.display())))?;
        if meta.is_dir() {
            let mut problems = Vec::new();
            let found = crate::engine::base::files::read_tree(path, is_yaml, &mut problems);
            if let Some(problem) = problems.first() {
                return Err(CommandError(problem.to_string()));
            }
            files.extend(
                found
                    .into_iter()
                    .filter(|(_, _, text)| text.contains(RULE_TEST_KIND))
                    .map(|(_, path, _)| path),
            );
        } else {
            files.push(path.clone());
        }
    }
    Ok(files)
}

fn is_yaml(path: &Path) -> bool {
    matches!(path.extension().and_then(|e| e.to_str()), Some("yaml" | "yml"))
}

fn run_file(set: &RuleSet, file: &Path, report: &mut Report) {
    let broken = |line: u64, message: String| CaseResult {
        file: file.to_path_buf(),
        line,
        suite: file.display().to_string(),
        name: "(test file)".to_owned(),
        failures: vec![message],
        seconds: 0.0,
    };
    let text = match std::fs::read_to_string(file) {
        Ok(text) => text,
        Err(e) => return report.cases.push(broken(0, format!("cannot read: {e}"))),
    };
    let docs: Vec<RuleTestDocument> = match serde_saphyr::from_multiple_with_options(&text, yaml::kubernetes_options())
    {
        Ok(docs) => docs,
        Err(e) => {
            let e = yaml::YamlError::from_saphyr(&e);
            let hint = if e.message.contains("unknown field") {
                " (see the RuleTest reference in docs/reference/ruletest.md or schema/ruletest.schema.json)"
            } else {
                ""
            };
            return report
                .cases
                .push(broken(e.line.unwrap_or(0), format!("error: {}{hint}", e.message)));
        }
    };
    for doc in docs {
        if doc.api_version.value != RULE_API_VERSION || doc.kind.value != RULE_TEST_KIND {
            report.cases.push(broken(
                doc.api_version.referenced.line(),
                format!(
                    "error: expected apiVersion {RULE_API_VERSION} and kind {RULE_TEST_KIND}, found {} {}",
                    doc.api_version.value, doc.kind.value
                ),
            ));
            continue;
        }
        for case in &doc.spec.cases {
            let started = Instant::now();
            let failures = run_case(set, file, case).unwrap_or_else(|e| vec![e]);
            report.cases.push(CaseResult {
                file: file.to_path_buf(),
                line: case.name.referenced.line(),
                suite: doc.metadata.name.clone(),
                name: case.name.value.clone(),
                failures,
                seconds: started.elapsed().as_secs_f64(),
            });
        }
    }
}

/// The failed expectations of one case; `Err` when the case could not be planned at all.
fn run_case(set: &RuleSet, file: &Path, case: &TestCase) -> Result<Vec<String>, String> {
    let dir = file.parent().unwrap_or(Path::new("."));
    let (mut parent, origin) = match (&case.parent, &case.parent_file) {
        (Some(parent), None) => (parent.clone(), file.to_path_buf()),
        (None, Some(path)) => {
            let path = dir.join(path);
            (offline::read_parent(&path).map_err(|e| e.0)?, path)
        }
        _ => return Err("error: set exactly one of `parent` and `parentFile`".to_owned()),
    };
    if let Some(patch) = &case.parent_patch {
        merge_patch(&mut parent, patch);
    }
    let files: Vec<Value> = case.observed.iter().chain(&case.lookups).cloned().collect();
    let now = case.now.as_deref().unwrap_or(DEFAULT_NOW);
    let admission = if case.crd_admission {
        offline::Admission::ByCrd
    } else {
        offline::Admission::None
    };
    let planned = offline::plan_offline(set, parent, files, &origin, now, admission).map_err(|e| e.0)?;
    Ok(check(&case.expect, &planned.parent, &planned.result))
}

/// RFC 7386 JSON merge patch.
fn merge_patch(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = Value::Object(Map::new());
    }
    if let Value::Object(map) = target {
        for (key, value) in patch {
            if value.is_null() {
                map.remove(key);
            } else {
                merge_patch(map.entry(key.clone()).or_insert(Value::Null), value);
            }
        }
    }
}

fn check(expect: &Expectations, parent: &Value, result: &Result<Plan, PlanError>) -> Vec<String> {
    let plan = match (result, &expect.error) {
        (Err(error), Some(wanted)) => return check_error(error, wanted),
        (Ok(_), Some(wanted)) => {
            return vec![format!(
                "error: expected the plan to fail with {:?}, but it succeeded",
                wanted.contains
            )];
        }
        (Err(error), None) => {
            return vec![format!("error: the plan failed (reason {}): {error}", error.reason())];
        }
        (Ok(plan), None) => plan,
    };
    // An item a `scaling: Ordered` forEach holds back is not created by this reconcile: it
    // counts as not desired (yet) for `children`, `absent` and `counts`.
    let plan = &Plan {
        children: plan
            .children
            .iter()
            .filter(|c| c.update != ChildUpdate::Wait)
            .cloned()
            .collect(),
        ..plan.clone()
    };
    let mut failures = Vec::new();
    let mut fail = |m: Mismatch| failures.push(m.to_string());
    let desired: Vec<String> = plan
        .children
        .iter()
        .map(|c| format!("{} {}", c.target.kind, c.target.name))
        .collect();
    let in_namespace =
        |wanted: &Option<String>, target: &ChildRef| wanted.as_ref().is_none_or(|ns| *ns == target.namespace);
    let shown = |kind: &str, name: &str, namespace: &Option<String>| match namespace {
        Some(ns) if !ns.is_empty() => format!("{kind} {ns}/{name}"),
        _ => format!("{kind} {name}"),
    };
    for wanted in &expect.children {
        let path = format!("children[{}]", shown(&wanted.kind, &wanted.name, &wanted.namespace));
        let found = plan.children.iter().find(|c| {
            c.target.kind == wanted.kind
                && c.target.name == wanted.name
                && in_namespace(&wanted.namespace, &c.target)
                && wanted.id.as_ref().is_none_or(|id| *id == c.id)
        });
        match (found, &wanted.fields) {
            (None, _) => fail(Mismatch {
                path,
                expected: "a desired child".to_owned(),
                actual: format!("<absent> (desired: {})", list_or_none(&desired)),
            }),
            (Some(child), Some(fields)) => {
                if let Err(m) = subset(fields, Some(&child.object), &path) {
                    fail(m);
                }
            }
            (Some(_), None) => {}
        }
    }
    for absent in &expect.absent {
        if plan.children.iter().any(|c| {
            c.target.kind == absent.kind && c.target.name == absent.name && in_namespace(&absent.namespace, &c.target)
        }) {
            fail(Mismatch {
                path: format!("absent[{}]", shown(&absent.kind, &absent.name, &absent.namespace)),
                expected: "<absent>".to_owned(),
                actual: "a desired child".to_owned(),
            });
        }
    }
    for (kind, count) in &expect.counts {
        let have = plan.children.iter().filter(|c| c.target.kind == *kind).count();
        if have != *count {
            fail(Mismatch {
                path: format!("counts.{kind}"),
                expected: count.to_string(),
                actual: have.to_string(),
            });
        }
    }
    if let Some(prune) = &expect.prune {
        let mut want: Vec<String> = prune.iter().map(|p| shown(&p.kind, &p.name, &p.namespace)).collect();
        // A pruned object is shown with its namespace where the expectation names one.
        let mut have: Vec<String> = plan
            .prune
            .iter()
            .map(|p| {
                let named = prune
                    .iter()
                    .any(|w| w.kind == p.kind && w.name == p.name && w.namespace.is_some());
                shown(&p.kind, &p.name, &named.then(|| p.namespace.clone()))
            })
            .collect();
        want.sort();
        have.sort();
        if want != have {
            fail(Mismatch {
                path: "prune".to_owned(),
                expected: list_or_none(&want),
                actual: list_or_none(&have),
            });
        }
    }
    if let Some(waiting) = &expect.waiting {
        let mut want = waiting.clone();
        let mut have: Vec<String> = plan.waiting.iter().map(|w| w.id.clone()).collect();
        want.sort();
        have.sort();
        if want != have {
            fail(Mismatch {
                path: "waiting".to_owned(),
                expected: list_or_none(&want),
                actual: list_or_none(&have),
            });
        }
    }
    for (id, wanted) in &expect.actions {
        let path = format!("actions.{id}");
        let Some(decision) = plan.actions.iter().find(|a| a.id == *id) else {
            fail(Mismatch {
                path,
                expected: "a decision".to_owned(),
                actual: format!(
                    "<absent> (actions: {})",
                    list_or_none(&plan.actions.iter().map(|a| a.id.clone()).collect::<Vec<_>>())
                ),
            });
            continue;
        };
        if decision.run != wanted.run {
            fail(Mismatch {
                path: format!("{path}.run"),
                expected: wanted.run.to_string(),
                actual: format!("{} ({})", decision.run, decision.reason),
            });
            continue;
        }
        if let Some(reason) = &wanted.reason
            && !decision.reason.contains(reason.as_str())
        {
            fail(Mismatch {
                path: format!("{path}.reason"),
                expected: format!("text containing {reason:?}"),
                actual: format!("{:?}", decision.reason),
            });
        }
        if let Some(effect) = &wanted.effect {
            let actual = decision.effect.as_ref().map(|e| match e {
                crate::engine::plan::actions::Effect::Create(object) => object.clone(),
                crate::engine::plan::actions::Effect::Http(request) => {
                    serde_json::to_value(request).unwrap_or_default()
                }
            });
            if let Err(m) = subset(effect, actual.as_ref(), &format!("{path}.effect")) {
                fail(m);
            }
        }
    }
    if let Some(wanted) = expect.finalizer {
        use crate::engine::plan::deletion::FinalizerStep;
        let have = match plan.finalizer {
            FinalizerStep::Add => model::FinalizerExpectation::Add,
            FinalizerStep::Remove => model::FinalizerExpectation::Remove,
            FinalizerStep::Unchanged => model::FinalizerExpectation::Unchanged,
        };
        if have != wanted {
            fail(Mismatch {
                path: "finalizer".to_owned(),
                expected: format!("{wanted:?}").to_lowercase(),
                actual: format!("{have:?}").to_lowercase(),
            });
        }
    }
    if let Some(texts) = &expect.deletion_waiting {
        let waiting = plan.deletion.as_ref().map(|d| d.waiting.clone()).unwrap_or_default();
        let missing = texts.iter().find(|t| !waiting.iter().any(|w| w.contains(t.as_str())));
        if missing.is_some() || (texts.is_empty() && !waiting.is_empty()) {
            fail(Mismatch {
                path: "deletionWaiting".to_owned(),
                expected: match missing {
                    Some(text) => format!("a line containing {text:?}"),
                    None => "nothing".to_owned(),
                },
                actual: list_or_none(&waiting),
            });
        }
    }
    if let Some(status) = &expect.status {
        let mut after = parent
            .get("status")
            .cloned()
            .unwrap_or_else(|| Value::Object(Map::new()));
        // The patch is a merge patch of the parent (`{status: {...}}`).
        if let Some(patch) = plan.status_patch.as_ref().and_then(|p| p.get("status")) {
            merge_patch(&mut after, patch);
        }
        if let Err(m) = subset(status, Some(&after), "status") {
            fail(m);
        }
    }
    failures
}

fn check_error(error: &PlanError, wanted: &model::ErrorExpectation) -> Vec<String> {
    let mut failures = Vec::new();
    let message = error.to_string();
    if !message.contains(&wanted.contains) {
        failures.push(format!(
            "error: expected text containing {:?}, got {}",
            wanted.contains,
            show(Some(&Value::from(message.clone())))
        ));
    }
    if let Some(at) = &wanted.at {
        let location = error_location(error);
        if !location.as_deref().is_some_and(|l| l.starts_with(at.as_str())) {
            failures.push(format!(
                "error.at: expected {at:?}, got {}",
                location.map_or_else(|| "no location".to_owned(), |l| format!("{l:?}"))
            ));
        }
    }
    if let Some(reason) = &wanted.reason
        && reason != error.reason()
    {
        failures.push(format!("error.reason: expected {reason}, got {}", error.reason()));
    }
    failures
}

/// Where a plan error is reported: `template:line`, a template, or the rule file's `forEach`.
pub(crate) fn error_location(error: &PlanError) -> Option<String> {
    match error {
        PlanError::Render(e) => match (&e.template, e.line) {
            (Some(t), Some(l)) => Some(format!("{t}:{l}")),
            (Some(t), None) => Some(t.clone()),
            _ => None,
        },
        PlanError::InvalidChild { template, .. } | PlanError::PlanTooLarge { template, .. } => Some(template.clone()),
        PlanError::ForEach { at, .. }
        | PlanError::LookupNamespaceNotAllowed { at, .. }
        | PlanError::LookupTooLarge { at, .. } => Some(at.clone()),
        PlanError::InvalidParent(_) | PlanError::NamespaceNotAllowed { .. } => None,
    }
}

fn list_or_none(items: &[String]) -> String {
    if items.is_empty() {
        "none".to_owned()
    } else {
        items.join(", ")
    }
}

/// `ruleop test` as a command: prints the report (or why nothing ran), writes `junit`, and
/// returns the exit code: 0 all passed, 1 any failed, 2 nothing could be run.
pub(crate) fn command(
    sources: &crate::cmd::cli::Sources,
    schemas: &crate::cmd::cli::SchemaSources,
    paths: &[PathBuf],
    tests_dir: Option<PathBuf>,
    junit: Option<&Path>,
) -> u8 {
    let set = match offline::load_checked(sources, schemas) {
        Ok((set, _)) => set,
        Err(diagnostics) => {
            eprintln!("{diagnostics}\nerror: the rules are invalid; no test was run");
            return 2;
        }
    };
    let default_dir = tests_dir.unwrap_or_else(|| {
        sources
            .rules
            .parent()
            .map_or_else(|| PathBuf::from("tests"), |p| p.join("tests"))
    });
    let report = match run(&set, paths, &default_dir) {
        Ok(report) => report,
        Err(e) => {
            eprintln!("{e}");
            return 2;
        }
    };
    print!("{}", report.text());
    if let Some(path) = junit
        && let Err(e) = std::fs::write(path, junit::xml(&report))
    {
        eprintln!("{}: error: cannot write JUnit XML: {e}", path.display());
        return 2;
    }
    u8::from(report.failed() > 0)
}
