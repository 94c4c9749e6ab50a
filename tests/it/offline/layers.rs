//! The folder tree is the architecture: each layer of src/ imports only the layers below it, and
//! the pure engine imports no client, async runtime or file watcher.

use std::collections::BTreeSet;
use std::path::Path;

/// The layers from the bottom up; each may import those before it.
/// `offline` (check, render, test: the engine without a cluster) sits right above the engine;
/// `inspect` (the read-only live views) above the runtime; `cmd`, the shell, on top.
const LAYERS: &[&str] = &[
    "engine", "offline", "ops", "cache", "apply", "ha", "runtime", "inspect", "cmd",
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
