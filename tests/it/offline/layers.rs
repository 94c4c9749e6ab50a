//! The folder tree is the architecture: each layer of src/ imports only the layers below it, and
//! the pure engine imports no client, async runtime or file watcher.

use std::collections::BTreeSet;
use std::path::Path;

/// The layers from the bottom up; each may import those before it.
const LAYERS: &[&str] = &["engine", "ops", "cache", "apply", "ha", "records", "runtime", "cmd"];

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

/// The files and folders of `src/runtime/` from the bottom up: each imports (by `crate::runtime::`
/// paths) only those before it, and the files of its own folder entry. A new file gets a place
/// here.
const RUNTIME_ORDER: &[&str] = &[
    "shutdown",
    "queue",
    "workers",
    "admit",
    "pins",
    "rollout/staging",
    "rollout/resume",
    "controller",
    "supervisor",
    "rollout/driver",
    "reload/watch",
    "reload/decide",
    "reload/reloader",
    "run",
];

/// The rank in [`RUNTIME_ORDER`] of a module path under `runtime` (`["rollout", "staging", ..]`):
/// its longest entry.
fn runtime_rank(segments: &[&str]) -> Option<usize> {
    (1..=segments.len())
        .rev()
        .find_map(|n| RUNTIME_ORDER.iter().position(|entry| *entry == segments[..n].join("/")))
}

/// The module paths named by `crate::runtime::` in `code`, as segments.
fn runtime_paths(code: &str) -> Vec<Vec<&str>> {
    code.match_indices("crate::runtime::")
        .map(|(at, found)| {
            let rest = &code[at + found.len()..];
            let end = rest
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                .unwrap_or(rest.len());
            rest[..end].split("::").filter(|s| !s.is_empty()).collect()
        })
        .collect()
}

#[test]
fn every_runtime_file_imports_only_the_runtime_files_below_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/runtime");
    let mut files = Vec::new();
    sources(&root, &mut files);
    let mut wrong = Vec::new();
    for (file, text) in &files {
        let relative = Path::new(file).strip_prefix(&root).expect("under src/runtime");
        let module = relative.with_extension("").to_string_lossy().replace('\\', "/");
        let segments: Vec<&str> = module.split('/').filter(|s| *s != "mod").collect();
        let Some(rank) = runtime_rank(&segments) else {
            if !module.ends_with("mod") {
                wrong.push(format!("{file} has no place in RUNTIME_ORDER"));
            }
            continue;
        };
        let code = text.split("#[cfg(test)]").next().unwrap_or_default();
        for path in runtime_paths(code) {
            match runtime_rank(&path) {
                Some(named) if named <= rank => {}
                Some(named) => wrong.push(format!(
                    "{file} ({}) imports {}",
                    RUNTIME_ORDER[rank], RUNTIME_ORDER[named]
                )),
                None => wrong.push(format!(
                    "{file} imports runtime::{}, which has no place in RUNTIME_ORDER",
                    path.join("::")
                )),
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "imports against the runtime's order:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_runtime_order_check_sees_an_import_that_points_up() {
    let code = "use crate::runtime::rollout::driver::Driver;\nuse crate::runtime::queue::Trigger;";
    let ranks: Vec<Option<usize>> = runtime_paths(code).iter().map(|p| runtime_rank(p)).collect();
    let driver = RUNTIME_ORDER.iter().position(|e| *e == "rollout/driver");
    let queue = RUNTIME_ORDER.iter().position(|e| *e == "queue");
    assert_eq!(ranks, [driver, queue]);
    let staging = runtime_rank(&["rollout", "staging"]).expect("placed");
    assert!(
        driver.expect("placed") > staging,
        "so staging importing the driver is refused"
    );
    assert_eq!(runtime_rank(&["controller", "streams"]), runtime_rank(&["controller"]));
}
