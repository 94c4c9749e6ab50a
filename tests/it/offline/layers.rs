//! The folder tree is the architecture: each layer of src/ imports only the layers below it, and
//! the pure engine imports no client, async runtime or file watcher. Inside a layer the same
//! holds: [`ORDERS`] writes down the order of a folder's modules, and an import against it fails.

use std::collections::BTreeSet;
use std::path::Path;

/// The layers from the bottom up; each may import those before it.
/// `offline` (check, render, test: the engine without a cluster) sits right above the engine;
/// `records` (ruleop's own ConfigMaps) under the runtime; `inspect` (the read-only live views)
/// above the runtime; `cmd`, the shell, on top.
const LAYERS: &[&str] = &[
    "engine", "offline", "ops", "cache", "apply", "ha", "records", "runtime", "inspect", "cmd",
];

/// Crates the engine must never name: planning is a function of values.
const NOT_IN_ENGINE: &[&str] = &["kube", "tokio", "notify", "reqwest", "axum", "hyper"];

fn sources(dir: &Path, out: &mut Vec<(String, String)>) {
    for entry in std::fs::read_dir(dir).expect("read src").flatten() {
        let path = entry.path();
        if path.is_dir() {
            sources(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let text = std::fs::read_to_string(&path).expect("read source");
            out.push((path.display().to_string(), text));
        }
    }
}

/// `(file, layer it names)` for every `crate::<layer>` path in `layer`'s files, tests excluded.
fn imports_of(layer: &str) -> Vec<(String, String)> {
    let mut files = Vec::new();
    sources(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(layer),
        &mut files,
    );
    let mut edges = BTreeSet::new();
    for (file, text) in files {
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for named in LAYERS {
            if code.contains(&format!("crate::{named}::")) || code.contains(&format!("crate::{named};")) {
                edges.insert((file.clone(), (*named).to_owned()));
            }
        }
    }
    edges.into_iter().collect()
}

#[test]
fn every_layer_imports_only_the_layers_below_it() {
    let mut upward = Vec::new();
    for (rank, layer) in LAYERS.iter().enumerate() {
        for (file, named) in imports_of(layer) {
            let named_rank = LAYERS.iter().position(|l| *l == named).expect("a layer");
            if named_rank > rank {
                upward.push(format!("{file} ({layer}) imports {named}"));
            }
        }
    }
    assert!(upward.is_empty(), "imports that point up:\n{}", upward.join("\n"));
}

#[test]
fn the_engine_names_no_client_runtime_or_watcher_crate() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/engine"), &mut files);
    let mut found = Vec::new();
    for (file, text) in &files {
        for line in text.lines() {
            let line = line.trim_start();
            if line.starts_with("//") {
                continue;
            }
            for name in NOT_IN_ENGINE {
                if line.contains(&format!("{name}::")) && !line.contains(&format!("_{name}::")) {
                    found.push(format!("{file}: {line}"));
                }
            }
        }
    }
    assert!(found.is_empty(), "the engine names I/O crates:\n{}", found.join("\n"));
}

#[test]
fn only_the_run_loop_names_the_admin_server_and_everyone_else_reports_through_observability() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), &mut files);
    let mut found = Vec::new();
    for (file, text) in &files {
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let path = file.replace('\\', "/");
        if path.ends_with("src/ops/admin.rs")
            || path.ends_with("src/ops/mod.rs")
            || path.ends_with("src/runtime/run.rs")
        {
            continue;
        }
        if code.contains("ops::admin") {
            found.push(file.clone());
        }
    }
    assert!(
        found.is_empty(),
        "modules that name the admin server (use ops::Observability):\n{}",
        found.join("\n")
    );
}

/// The one file of `cmd/` that may name `runtime::`: the entry that starts `ruleop run`. Every
/// other command (the read-only tools included) reads ruleop's own ConfigMaps through `records/`.
const RUNTIME_ENTRY: &str = "src/cmd/run.rs";

#[test]
fn only_the_run_command_imports_the_runtime() {
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cmd"), &mut files);
    let mut found = Vec::new();
    let mut entry_seen = false;
    for (file, text) in &files {
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        let names_runtime = code.contains("crate::runtime::") || code.contains("crate::runtime;");
        if file.replace('\\', "/").ends_with(RUNTIME_ENTRY) {
            entry_seen = names_runtime;
        } else if names_runtime {
            found.push(file.clone());
        }
    }
    assert!(
        found.is_empty(),
        "cmd files that import the runtime (read through records/):\n{}",
        found.join("\n")
    );
    assert!(
        entry_seen,
        "{RUNTIME_ENTRY} starts `ruleop run` through the runtime; update RUNTIME_ENTRY if it moved"
    );
}

/// The order inside a folder of src/: its modules (files or subfolders) from the bottom up, in
/// levels. A module may import only modules of lower levels; modules of one level import none of
/// each other. Every module of the folder must be placed, so a new one takes a stand. A folder's
/// `mod.rs` is left out: it is the folder's face (it declares every module, and may hold the
/// types they share, such as `plan::PlanError`). Another folder is one more row.
const ORDERS: &[(&str, &[&[&str]])] = &[
    (
        "engine",
        &[
            // The floor: located diagnostics, YAML, where an http action may go.
            &["diagnostic", "yaml", "egress"],
            // Durations, field names at a YAML position, digests, k8s names, built-in kinds, cron.
            &["duration", "field_at", "base"],
            // Structural schemas (a rule set carries a catalog of them), strict templates.
            &["schema", "template"],
            // Loading and validating rules.
            &["rules"],
            // Planning, the staged-rollout decisions, `ruleop rbac`.
            &["plan", "rollout", "rbac"],
            // Rules checked against schemas (knows the plan's status fields), the fuzz bodies.
            &["schema_check", "fuzzing"],
        ],
    ),
    (
        "engine/plan",
        &[
            // Values: the template context and labels, status conditions, relocated errors.
            &["context", "status", "relocate"],
            // Reads: lookups, forEach items, the parent's metadata, the paused plan.
            &["lookups", "foreach", "parent_metadata", "pause"],
            // Where children may live; observed children by id and item.
            &["scope", "observed"],
            // Proof of ownership, status evaluation, readiness and dependsOn.
            &["ownership", "status_eval", "order"],
            // Rendering a child.
            &["children"],
            // Actions, update strategies and removal, the namespace guard.
            &["actions", "lifecycle", "namespace_guard"],
            // The parent's deletion, ordered scaling.
            &["deletion", "scaling"],
        ],
    ),
    (
        "records",
        &[
            // The clock, a ConfigMap watch, the kept revisions.
            &["clock", "feed", "revisions"],
            // `ruleop-status`'s reload report, the rollout requests.
            &["status", "requests"],
            // The rollouts' states: keys of `ruleop-status`, followed through a watch.
            &["rollouts"],
        ],
    ),
    (
        "runtime",
        &[
            // The bounded stop, a parent's trigger and queue depth, the fair workers.
            &["shutdown", "queue", "workers"],
            // The one way in for a rule set.
            &["admit"],
            // Parents pinned to a kept revision (its set admitted once).
            &["pins"],
            // A staged rollout's state between reconciles, resumed and followed.
            &["rollout"],
            // One controller per rule (each reconcile asks the rollout and the pins).
            &["controller"],
            // The running controllers, kept in step with the rule set.
            &["supervisor"],
            // The reload loop: reloads, and the staged rollouts' step clock and requests.
            &["reload"],
            // Wiring.
            &["run"],
        ],
    ),
    ("runtime/rollout", &[&["staging"], &["resume"]]),
    (
        "runtime/reload",
        &[
            // Watching the files, the pure decisions, the rollouts' half of the loop.
            &["watch", "decide", "rollouts"],
            // The Reloader that carries them out.
            &["reloader"],
        ],
    ),
    (
        "runtime/controller",
        &[
            &["circuit", "resync"],
            &["housekeeping"],
            &["policy"],
            &["reconcile"],
            &["streams"],
        ],
    ),
];

/// The module path of a source file below src/ (`engine/plan/children.rs` -> engine, plan,
/// children; a `mod.rs` is its folder).
fn module_of(relative: &Path) -> Vec<String> {
    let mut parts: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts.last().is_some_and(|last| last == "mod") {
        parts.pop();
    }
    parts
}

fn identifier(text: &str) -> (&str, &str) {
    let end = text
        .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .unwrap_or(text.len());
    text.split_at(end)
}

/// The paths one path expression names, groups expanded: `super::{a, b::{c, self}}` names
/// `super::a`, `super::b::c` and `super::b`.
fn expand(text: &str) -> Vec<Vec<String>> {
    let mut prefix = Vec::new();
    let mut rest = text;
    loop {
        let (name, after) = identifier(rest);
        if name.is_empty() {
            break;
        }
        if name != "self" {
            prefix.push(name.to_owned());
        }
        let Some(next) = after.strip_prefix("::") else {
            break;
        };
        let next = next.trim_start();
        if let Some(group) = next.strip_prefix('{') {
            let mut named = Vec::new();
            let (mut depth, mut start) = (0, 0);
            for (i, c) in group.char_indices() {
                match c {
                    '{' => depth += 1,
                    '}' | ',' if depth == 0 => {
                        for tail in expand(group[start..i].trim()) {
                            named.push([prefix.clone(), tail].concat());
                        }
                        if c == '}' {
                            break;
                        }
                        start = i + 1;
                    }
                    '}' => depth -= 1,
                    _ => {}
                }
            }
            return named;
        }
        rest = next;
    }
    vec![prefix]
}

/// Every module path a file names through `crate::` or `super::`, made absolute (below
/// `crate`); comment lines and the test module left out.
fn named_paths(module: &[String], text: &str) -> Vec<Vec<String>> {
    let code = match text.find("#[cfg(test)]\nmod ") {
        Some(tests) => &text[..tests],
        None => text,
    };
    let code: String = code
        .lines()
        .filter(|line| !line.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n");
    let mut named = Vec::new();
    for (at, _) in code.match_indices("::") {
        let (before, _) = code.split_at(at);
        let start = before
            .rfind(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .map_or(0, |i| i + 1);
        let root = &before[start..];
        if root != "crate" && root != "super" {
            continue;
        }
        // Only where a path begins: not the `super` of `super::super::x`.
        if code[..start].ends_with("::") {
            continue;
        }
        for path in expand(&code[start..]) {
            let mut absolute = module.to_vec();
            let mut segments = path.into_iter().peekable();
            if segments.peek().is_some_and(|s| s == "crate") {
                absolute.clear();
                segments.next();
            }
            while segments.peek().is_some_and(|s| s == "super") {
                absolute.pop();
                segments.next();
            }
            absolute.extend(segments);
            named.push(absolute);
        }
    }
    named
}

#[test]
fn inside_a_folder_every_module_imports_only_the_levels_below_its_own() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut against = Vec::new();
    for (folder, levels) in ORDERS {
        let level_of = |module: &str| levels.iter().position(|level| level.contains(&module));
        let root: Vec<String> = folder.split('/').map(str::to_owned).collect();
        let mut modules = BTreeSet::new();
        for entry in std::fs::read_dir(src.join(folder)).expect("read folder").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let module = name.strip_suffix(".rs").unwrap_or(&name).to_owned();
            // `tests.rs` is the folder's mod.rs's test module, not a module of the order.
            if module != "mod" && module != "tests" && (entry.path().is_dir() || name.ends_with(".rs")) {
                modules.insert(module);
            }
        }
        for module in &modules {
            if level_of(module).is_none() {
                against.push(format!("src/{folder}/{module} is in no level of the order of {folder}"));
            }
        }
        for placed in levels.iter().flat_map(|level| level.iter()) {
            if !modules.contains(*placed) {
                against.push(format!(
                    "the order of {folder} names {placed}, which src/{folder} does not hold"
                ));
            }
        }
        let mut files = Vec::new();
        sources(&src.join(folder), &mut files);
        for (file, text) in files {
            let relative = Path::new(&file).strip_prefix(&src).expect("below src").to_path_buf();
            let module = module_of(&relative);
            let Some(own) = module.get(root.len()) else {
                continue; // the folder's mod.rs
            };
            let Some(own_level) = level_of(own) else { continue };
            for path in named_paths(&module, &text) {
                if !path.starts_with(&root) {
                    continue;
                }
                let Some(named) = path.get(root.len()) else { continue };
                if named == own || !modules.contains(named) {
                    continue;
                }
                if level_of(named).is_none_or(|level| level >= own_level) {
                    against.push(format!("{file} ({folder}/{own}) imports {folder}/{named}"));
                }
            }
        }
    }
    against.sort();
    against.dedup();
    assert!(
        against.is_empty(),
        "imports against the written order (tests/it/offline/layers.rs, ORDERS):\n{}",
        against.join("\n")
    );
}

#[test]
fn grouped_and_relative_imports_are_read_as_the_modules_they_name() {
    let module = ["engine", "plan", "deletion"].map(str::to_owned);
    let named = named_paths(
        &module,
        "use super::{Plan, lifecycle, children::{self, ObjectRef}};\nuse crate::engine::{duration, rules::model};\n// super::scope in a comment\nlet x = super::super::yaml::to_string(v);\n#[cfg(test)]\nmod tests { use crate::engine::rollout; }",
    );
    let shown: Vec<String> = named.iter().map(|path| path.join("::")).collect();
    assert_eq!(
        shown,
        [
            "engine::plan::Plan",
            "engine::plan::lifecycle",
            "engine::plan::children",
            "engine::plan::children::ObjectRef",
            "engine::duration",
            "engine::rules::model",
            "engine::yaml::to_string",
        ]
    );
}

#[test]
fn the_offline_commands_name_no_client_runtime_or_watcher_crate() {
    // `check`, `render` and `test` run without a cluster, as the engine they wrap.
    let mut files = Vec::new();
    sources(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src/offline"), &mut files);
    let found: Vec<String> = files
        .iter()
        .flat_map(|(file, text)| {
            text.lines()
                .map(str::trim_start)
                .filter(|line| !line.starts_with("//"))
                .filter(|line| {
                    NOT_IN_ENGINE
                        .iter()
                        .any(|name| line.contains(&format!("{name}::")) && !line.contains(&format!("_{name}::")))
                })
                .map(move |line| format!("{file}: {line}"))
        })
        .collect();
    assert!(
        found.is_empty(),
        "the offline commands name I/O crates:\n{}",
        found.join("\n")
    );
}
