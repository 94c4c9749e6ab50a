//! Fixture-driven snapshot tests of the offline engine: one case per file in tests/inputs.
//!
//! A case starts from a copy of the shipped rules/ and templates/ and overlays its sections:
//! `=== <path>` followed by the file's text (`rules/...`, `templates/...`, `deploy/crds/...`,
//! `parent.yaml`, `observed/...`). The output of `check`, then of `render` when the case has a parent, is
//! snapshotted; cases under pass/ must succeed and cases under fail/ must fail.

use std::fs;
use std::path::{Path, PathBuf};

use ruleop::offline;
use ruleop::offline::{OutputFormat, SchemaSources, Sources};

const NOW: &str = "2026-11-29T10:00:00Z";

fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).expect("create dir");
    for entry in fs::read_dir(from).expect("read dir").flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            fs::copy(entry.path(), target).expect("copy");
        }
    }
}

/// Writes the case into a fresh directory and returns it.
fn materialise(case: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    copy_tree(&root.join("rules"), &dir.path().join("rules"));
    copy_tree(&root.join("templates"), &dir.path().join("templates"));
    copy_tree(&root.join("deploy/crds"), &dir.path().join("deploy/crds"));
    let mut current: Option<(PathBuf, String)> = None;
    let flush = |current: &mut Option<(PathBuf, String)>| {
        if let Some((path, text)) = current.take() {
            let path = dir.path().join(path);
            fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
            fs::write(path, text).expect("write");
        }
    };
    for line in case.lines() {
        if let Some(path) = line.strip_prefix("=== ") {
            flush(&mut current);
            current = Some((PathBuf::from(path.trim()), String::new()));
        } else if let Some((_, text)) = current.as_mut() {
            text.push_str(line);
            text.push('\n');
        }
    }
    flush(&mut current);
    dir
}

/// Runs `check` and, when the case has a parent, `render`; returns (succeeded, output).
fn run_case(dir: &Path) -> (bool, String) {
    let sources = Sources {
        rules: dir.join("rules"),
        templates: dir.join("templates"),
    };
    let mut output = String::new();
    let mut ok = true;
    let schemas = SchemaSources::default();
    match offline::check(&sources, &schemas) {
        Ok(text) => output.push_str(&format!("check: {text}\n")),
        Err(e) => {
            ok = false;
            output.push_str(&format!("check failed:\n{e}\n"));
        }
    }
    let parent = dir.join("parent.yaml");
    if ok && parent.exists() {
        let observed = dir.join("observed");
        let observed = observed.exists().then_some(observed);
        let inputs = offline::RenderInputs {
            file: &parent,
            observed: observed.as_deref(),
            output: OutputFormat::Yaml,
            now: NOW,
        };
        match offline::render(&sources, &schemas, &inputs) {
            Ok(text) => output.push_str(&text),
            Err(e) => {
                ok = false;
                output.push_str(&format!("render failed:\n{e}\n"));
            }
        }
    }
    let shown = dir.display().to_string();
    (ok, output.replace(&format!("{shown}/"), "").replace(&shown, "."))
}

#[test]
fn passing_cases_render_as_snapshotted() {
    insta::glob!("../../inputs", "pass/*.case", |path| {
        let dir = materialise(&fs::read_to_string(path).expect("read case"));
        let (ok, output) = run_case(dir.path());
        assert!(ok, "{} should pass:\n{output}", path.display());
        insta::assert_snapshot!(output);
    });
}

#[test]
fn failing_cases_report_located_errors() {
    insta::glob!("../../inputs", "fail/*.case", |path| {
        let dir = materialise(&fs::read_to_string(path).expect("read case"));
        let (ok, output) = run_case(dir.path());
        assert!(!ok, "{} should fail:\n{output}", path.display());
        insta::assert_snapshot!(output);
    });
}
