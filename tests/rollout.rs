//! Rule revisions on the control plane: each content of a rule's files that comes into force is
//! kept, with its files, in a ConfigMap of the operator's namespace; `ruleop-status` names the
//! revision in force; a restarted operator reads the kept revisions back and numbers on.

mod support;

use std::time::Duration;

use support::mount::{Mount, files_under};
use support::*;

const RELOAD_FLAGS: &[&str] = &["--reload-debounce", "100ms", "--reload-interval", "30s"];

/// The kept revisions of `rule` in `ns`: `(number, changed files)`, by number.
fn kept_revisions(ns: &str, rule: &str) -> Vec<(u64, Vec<String>)> {
    let listed = kubectl_ok(&[
        "get",
        "configmaps",
        "-n",
        ns,
        "-l",
        &format!("ruleop.io/revision-of={rule}"),
        "-o",
        "json",
    ]);
    let listed: serde_json::Value = serde_json::from_str(&listed).expect("a list");
    let mut kept: Vec<(u64, Vec<String>)> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|cm| {
            let record: serde_json::Value =
                serde_json::from_str(cm["data"]["revision.json"].as_str().expect("a record")).expect("JSON");
            let changed = record["changed"]
                .as_array()
                .expect("changed")
                .iter()
                .map(|f| f.as_str().expect("a name").to_owned())
                .collect();
            (record["number"].as_u64().expect("a number"), changed)
        })
        .collect();
    kept.sort();
    kept
}

fn revisions_line(ns: &str) -> String {
    get(ns, "configmap/ruleop-status", "{.data.revisions}")
}

fn edit_service_template(files: &[(String, String)], edition: u32) -> Vec<(String, String)> {
    files
        .iter()
        .map(|(path, text)| {
            let text = if path == "database/service.yaml.j2" {
                text.replace(
                    "    app: {{ metadata.name }}\nspec:",
                    &format!("    app: {{{{ metadata.name }}}}\n    edition: \"{edition}\"\nspec:"),
                )
            } else {
                text.clone()
            };
            (path.clone(), text)
        })
        .collect()
}

#[test]
fn every_revision_is_kept_named_in_the_status_and_numbered_on_after_a_restart() {
    install_crds();
    let ns = Namespace::new("revisions");
    let rules = Mount::from_dir(&root().join("rules"));
    let template_files = files_under(&root().join("templates"));
    let mut templates = Mount::new(&template_files);
    let operator = Operator::start_with(rules.path(), templates.path(), &ns.0, RELOAD_FLAGS);
    wait_until(
        Duration::from_secs(30),
        "revision 1 of database in ruleop-status",
        || revisions_line(&ns.0).lines().any(|l| l == "database: 1"),
    );
    let first = kept_revisions(&ns.0, "database");
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(
        first[0].1.contains(&"rules/database.yaml".to_owned())
            && first[0].1.contains(&"templates/database/service.yaml.j2".to_owned()),
        "the first revision names every file of the rule: {first:?}"
    );

    templates.swap(&edit_service_template(&template_files, 1));
    wait_until(
        Duration::from_secs(30),
        "revision 2 of database in ruleop-status",
        || revisions_line(&ns.0).lines().any(|l| l == "database: 2"),
    );
    assert_eq!(
        kept_revisions(&ns.0, "database"),
        [
            first[0].clone(),
            (2, vec!["templates/database/service.yaml.j2".to_owned()])
        ],
        "the second revision names only the edited template"
    );
    assert!(
        revisions_line(&ns.0).lines().any(|l| l == "tenant: 1"),
        "a rule whose files did not change keeps its revision: {}",
        revisions_line(&ns.0)
    );
    drop(operator);

    // A new process over the same files makes no revision; the next edit is 3, not 1, and with
    // --keep-revisions 2 revision 1 is no longer kept.
    let mut flags = RELOAD_FLAGS.to_vec();
    flags.extend(["--keep-revisions", "2"]);
    let _restarted = Operator::start_with(rules.path(), templates.path(), &ns.0, &flags);
    templates.swap(&edit_service_template(&template_files, 2));
    wait_until(
        Duration::from_secs(30),
        "revision 3 of database in ruleop-status",
        || revisions_line(&ns.0).lines().any(|l| l == "database: 3"),
    );
    let numbers: Vec<u64> = kept_revisions(&ns.0, "database").iter().map(|(n, _)| *n).collect();
    assert_eq!(numbers, [2, 3], "the last two revisions are kept");
}
