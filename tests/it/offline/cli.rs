//! The `ruleop` binary as a user runs it: exit codes, where output goes.

use std::process::{Command, Output};

fn ruleop(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ruleop"))
        .args(args)
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env_remove("RULEOP_RULES")
        .env_remove("RULEOP_TEMPLATES")
        .output()
        .expect("ruleop runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

#[test]
fn check_accepts_the_shipped_rules() {
    let out = ruleop(&["check", "--rules", "rules", "--templates", "templates"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(text(&out.stdout).contains("ok: 3 rule(s) valid (cache, database, tenant)"));
}

#[test]
fn check_fails_with_a_located_error_for_a_broken_rule() {
    let dir = tempfile::tempdir().expect("tempdir");
    std::fs::write(dir.path().join("bad.yaml"), "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata: {name: x}\nspec:\n  watch: {apiVersion: a/v1, kind: A}\n  childs: []\n")
        .expect("write");
    let rules = dir.path().display().to_string();
    let out = ruleop(&["check", "--rules", &rules, "--templates", "templates"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(
        stderr.contains(&format!("{rules}/bad.yaml:6:3: error: unknown field `childs`")),
        "{stderr}"
    );
    assert!(text(&out.stdout).is_empty(), "nothing printed as if it succeeded");
}

#[test]
fn render_prints_children_actions_and_status() {
    let out = ruleop(&[
        "render",
        "-f",
        "examples/database.yaml",
        "--now",
        "2026-11-29T10:00:00Z",
    ]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    for expected in [
        "kind: Service",
        "kind: StatefulSet",
        "port: 5432",
        "# backup: RUN:",
        "#   observedGeneration: 1",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in:\n{stdout}");
    }
}

#[test]
fn render_of_a_bad_resource_exits_non_zero_and_prints_no_children() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("db.yaml");
    std::fs::write(&file, "apiVersion: myorg.io/v1\nkind: Database\nmetadata: {name: a}\nspec: {version: \"1\\nkind: X\", replicas: 1, storage: {size: 1Gi}}\n")
        .expect("write");
    let out = ruleop(&["render", "-f", &file.display().to_string()]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).is_empty());
    let refused = "the parent does not match its CRD (deploy/crds/database.yaml), so the API server would refuse it";
    assert!(text(&out.stderr).contains(refused), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("spec.version: \"1\\nkind: X\" does not match the pattern"));
    // Without the CRD (a kind whose schema lets the value through), the engine's own guard holds.
    let no_crds = dir.path().join("no-crds");
    std::fs::create_dir(&no_crds).expect("mkdir");
    let out = ruleop(&[
        "render",
        "--crds",
        &no_crds.display().to_string(),
        "-f",
        &file.display().to_string(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stdout).is_empty());
    assert!(text(&out.stderr).contains("database/statefulset.yaml.j2:21: value \"1\\nkind: X\" is not safe"));
}
