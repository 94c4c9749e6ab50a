//! Every generated file is what its generator writes now: `scripts/generate.sh` (`make
//! generate`) runs into a temporary directory, and each file of [`GENERATED`] must equal the
//! committed one. The table and the script list the same files (checked both ways), so a
//! generator cannot be added without its check. Helm is the pinned one (`scripts/helm.sh`,
//! built from the Go module proxy on first use).

use std::path::{Path, PathBuf};
use std::process::Command;

/// Each generated file and what writes it.
const GENERATED: &[(&str, &str)] = &[
    ("schema/rule.schema.json", "ruleop schema"),
    ("schema/ruletest.schema.json", "ruleop schema --kind rule-test"),
    ("docs/reference/cli.md", "ruleop reference cli (from clap)"),
    (
        "docs/reference/metrics.md",
        "ruleop reference metrics (from the registry)",
    ),
    ("deploy/helm/ruleop/files/clusterrole.yaml", "ruleop rbac (from rules/)"),
    ("deploy/base/ruleop.yaml", "helm template of deploy/helm/ruleop"),
    ("deploy/base/kustomization.yaml", "scripts/generate.sh"),
    (
        "deploy/observability/observability.yaml",
        "helm template of deploy/helm/ruleop, observability.enabled=true",
    ),
    ("deploy/observability/kustomization.yaml", "scripts/generate.sh"),
    (
        "kustomization.yaml",
        "scripts/generate.sh (from rules/, templates/ and deploy/crds)",
    ),
];

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The files below `dir`, as paths relative to it, sorted.
fn files(dir: &Path) -> Vec<String> {
    fn walk(base: &Path, dir: &Path, found: &mut Vec<String>) {
        for entry in std::fs::read_dir(dir).expect("read_dir").flatten() {
            let path: PathBuf = entry.path();
            if path.is_dir() {
                walk(base, &path, found);
            } else {
                let relative = path.strip_prefix(base).expect("below base");
                found.push(relative.display().to_string());
            }
        }
    }
    let mut found = Vec::new();
    walk(dir, dir, &mut found);
    found.sort();
    found
}

#[test]
fn every_generated_file_is_what_its_generator_writes_now() {
    let out = tempfile::tempdir().expect("tempdir");
    let run = Command::new(root().join("scripts/generate.sh"))
        .arg("--into")
        .arg(out.path())
        .env("RULEOP", env!("CARGO_BIN_EXE_ruleop"))
        .env_remove("RULEOP_RULES")
        .env_remove("RULEOP_TEMPLATES")
        .env_remove("RULEOP_CRDS")
        .current_dir(root())
        .output()
        .expect("scripts/generate.sh runs");
    assert!(
        run.status.success(),
        "scripts/generate.sh failed: {}",
        String::from_utf8_lossy(&run.stderr)
    );
    let mut listed: Vec<String> = GENERATED.iter().map(|(path, _)| (*path).to_owned()).collect();
    listed.sort();
    assert_eq!(
        files(out.path()),
        listed,
        "scripts/generate.sh and this table list different files"
    );
    let stale: Vec<String> = GENERATED
        .iter()
        .filter(|(path, _)| {
            let fresh = std::fs::read_to_string(out.path().join(path)).expect("generated");
            std::fs::read_to_string(root().join(path)).ok() != Some(fresh)
        })
        .map(|(path, generator)| format!("{path} (from {generator})"))
        .collect();
    assert!(stale.is_empty(), "stale, run `make generate`: {stale:#?}");
}
