//! The hand-written metric guide names every family of the generated metrics reference (its
//! freshness, with every generated file's: generated.rs).

use std::path::Path;
use std::process::Command;

fn committed(path: &str) -> String {
    std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).unwrap_or_default()
}

fn reference(page: &str) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_ruleop"))
        .args(["reference", page])
        .output()
        .expect("run ruleop reference");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("UTF-8 Markdown")
}

#[test]
fn the_metric_guide_names_every_family_of_the_registry() {
    let guide = committed("docs/operations/health-metrics.md");
    let page = reference("metrics");
    let missing: Vec<&str> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| `"))
        .filter_map(|l| l.split('`').next())
        .filter(|name| !guide.contains(&format!("`{name}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/operations/health-metrics.md does not say what to watch these for: {missing:?}"
    );
}
