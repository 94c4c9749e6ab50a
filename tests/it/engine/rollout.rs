//! Rule revisions and staged rollouts on the control plane: each content of a rule's files that
//! comes into force is kept, with its files, in a ConfigMap of the operator's namespace, and a
//! restarted operator numbers on; a change of a rule with `spec.rollout` reaches its parents step
//! by step, and halts when moved parents stop being ready.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use crate::support::audit::AuditMark;
use crate::support::custom::CustomKind;
use crate::support::mount::{Mount, files_under};
use crate::support::*;

pub(crate) const RELOAD_FLAGS: &[&str] = &["--reload-debounce", "100ms", "--reload-interval", "30s"];

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

/// `ruleop rollout <args> --status-namespace <ns>` against the control plane: exit code, stdout
/// then stderr.
fn rollout_command(ns: &str, args: &[&str]) -> (Option<i32>, String) {
    let out = std::process::Command::new(binary())
        .arg("rollout")
        .args(args)
        .args(["--status-namespace", ns])
        .env("KUBECONFIG", &control_plane().kubeconfig)
        .output()
        .expect("ruleop runs");
    (out.status.code(), text(&out.stdout) + &text(&out.stderr))
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
    let (code, history) = rollout_command(&ns.0, &["history", "database"]);
    assert_eq!(code, Some(0), "{history}");
    assert!(
        history.contains("revision 3")
            && history.contains("+    edition: \"2\"")
            && history.contains("-    edition: \"1\""),
        "the history shows revision 3's diff against revision 2:\n{history}"
    );
    let (code, status) = rollout_command(&ns.0, &["status", "database"]);
    assert_eq!(code, Some(0), "{status}");
    assert!(status.contains("rule database: revision 3"), "{status}");

    // A kept revision rendered and diffed, read from the cluster.
    apply_yaml(&ns.0, &database("db-0", 1, ""));
    wait_until(Duration::from_secs(60), "db-0's Service of revision 3", || {
        services_of_edition(&ns.0, 2).len() == 1
    });
    let parent = tempfile::NamedTempFile::new().expect("a file");
    std::fs::write(
        parent.path(),
        format!("apiVersion: myorg.io/v1\nkind: Database\nmetadata: {{name: db-0, namespace: {}}}\nspec: {{version: \"16\", replicas: 1, storage: {{size: 1Gi}}}}\n", ns.0),
    )
    .expect("written");
    let crds = root().join("deploy/crds");
    let render = |revision: &str| {
        let out = ruleop_command(
            &[
                "render",
                "-f",
                &parent.path().display().to_string(),
                "--crds",
                &crds.display().to_string(),
                "--revision",
                revision,
                "--status-namespace",
                &ns.0,
            ],
            rules.path(),
            templates.path(),
        );
        (out.status.code(), text(&out.stdout) + &text(&out.stderr))
    };
    let (code, two) = render("2");
    assert_eq!(code, Some(0), "{two}");
    assert!(
        two.contains("edition: '1'") || two.contains("edition: \"1\""),
        "revision 2's template:\n{two}"
    );
    let (code, three) = render("3");
    assert_eq!(code, Some(0), "{three}");
    assert!(
        three.contains("edition: '2'") || three.contains("edition: \"2\""),
        "revision 3's template:\n{three}"
    );
    let (code, one) = render("1");
    assert_ne!(code, Some(0), "{one}");
    assert!(one.contains("revision 1 of rule \"database\" is not kept"), "{one}");
    let out = ruleop_command(
        &[
            "diff",
            "-n",
            &ns.0,
            "--revision",
            "2",
            "--rule",
            "database",
            "--status-namespace",
            &ns.0,
        ],
        rules.path(),
        templates.path(),
    );
    let diff = text(&out.stdout);
    assert_eq!(
        out.status.code(),
        Some(1),
        "putting revision 2 back changes db-0's Service:\n{diff}{}",
        text(&out.stderr)
    );
    let changed = |sign: char, edition: char| {
        diff.lines()
            .any(|l| l.trim_start().starts_with(sign) && l.contains("edition:") && l.contains(edition))
    };
    assert!(changed('-', '2') && changed('+', '1'), "{diff}");
}

/// What `ruleop-status` says of `rule`'s rollout.
pub(crate) fn rollout_state(ns: &str, rule: &str) -> String {
    get(ns, "configmap/ruleop-status", &format!("{{.data.rollout\\.{rule}}}"))
}

/// Services in `ns` with the label `edition=<edition>`, and without an `edition` label, from
/// one list.
fn services_by_edition(ns: &str, edition: u32) -> (usize, usize) {
    let listed: serde_json::Value =
        serde_json::from_str(&kubectl_ok(&["get", "services", "-n", ns, "-o", "json"])).expect("JSON");
    let editions: Vec<Option<String>> = listed["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|service| service["metadata"]["labels"]["edition"].as_str().map(str::to_owned))
        .collect();
    let new = editions
        .iter()
        .filter(|e| e.as_deref() == Some(&edition.to_string()))
        .count();
    (new, editions.iter().filter(|e| e.is_none()).count())
}

/// How many Databases in `ns` record each revision in `status.ruleopRevision` (`0`: none).
fn databases_by_revision(ns: &str) -> BTreeMap<u64, usize> {
    let listed: serde_json::Value =
        serde_json::from_str(&kubectl_ok(&["get", "databases", "-n", ns, "-o", "json"])).expect("JSON");
    let mut counts = BTreeMap::new();
    for database in listed["items"].as_array().expect("items") {
        let revision = database["status"]["ruleopRevision"].as_u64().unwrap_or(0);
        *counts.entry(revision).or_default() += 1;
    }
    counts
}

/// The shipped rules with `database` rolled out 10% with `pause`, then 100%.
fn staged_database_rules(pause: Duration) -> Vec<(String, String)> {
    files_under(&root().join("rules"))
        .into_iter()
        .map(|(path, text)| {
            let text = if path == "database.yaml" {
                format!(
                    "{text}  rollout:\n    steps:\n      - {{percent: 10, pause: {}s}}\n      - {{percent: 100}}\n",
                    pause.as_secs()
                )
            } else {
                text
            };
            (path, text)
        })
        .collect()
}

/// The names of the Services in `ns` labelled `edition=<edition>`.
fn services_of_edition(ns: &str, edition: u32) -> Vec<String> {
    kubectl_ok(&[
        "get",
        "services",
        "-n",
        ns,
        "-l",
        &format!("edition={edition}"),
        "-o",
        "name",
    ])
    .lines()
    .map(str::to_owned)
    .collect()
}

#[test]
fn a_killed_operator_mid_rollout_is_followed_by_one_that_resumes_the_same_step_with_the_same_parents() {
    install_crds();
    let ns = Namespace::new("rollout-kill");
    let pause = Duration::from_secs(30);
    let rules = Mount::new(&staged_database_rules(pause));
    let template_files = files_under(&root().join("templates"));
    let mut templates = Mount::new(&template_files);
    let first = Operator::start_with(rules.path(), templates.path(), &ns.0, RELOAD_FLAGS);
    let databases: Vec<String> = (0..20).map(|i| database(&format!("db-{i}"), 1, "")).collect();
    apply_yaml(&ns.0, &databases.join("\n---\n"));
    wait_until(Duration::from_secs(60), "20 Services", || {
        services_by_edition(&ns.0, 1).1 == 20
    });
    let edited = Instant::now();
    templates.swap(&edit_service_template(&template_files, 1));
    wait_until(Duration::from_secs(30), "2 Services of the new template", || {
        services_by_edition(&ns.0, 1).0 == 2
    });
    let moved = services_of_edition(&ns.0, 1);
    // A third into the pause, so that a pause counted again from the restart would show.
    wait_until(pause, "a third of the pause to pass", || {
        assert_eq!(services_by_edition(&ns.0, 1), (2, 18), "before the kill");
        edited.elapsed() >= pause / 3
    });
    first.kill();
    let killed = edited.elapsed();
    let _second = Operator::start_with(rules.path(), templates.path(), &ns.0, RELOAD_FLAGS);
    let restarted = edited.elapsed();
    let mut polls = 0;
    wait_until(pause + Duration::from_secs(30), "the first step's pause to end", || {
        let (new, old) = services_by_edition(&ns.0, 1);
        let now_moved = services_of_edition(&ns.0, 1);
        if rollout_state(&ns.0, "database").contains("step: 2 of 2") {
            return true;
        }
        assert_eq!((new, old), (2, 18), "after the restart, during the first step's pause");
        assert_eq!(now_moved, moved, "the same 2 parents");
        polls += 1;
        false
    });
    let step_two = edited.elapsed();
    wait_until(Duration::from_secs(60), "all 20 Services of the new template", || {
        services_by_edition(&ns.0, 1) == (20, 0)
    });
    eprintln!(
        "edit -> SIGKILL at {killed:?}, new operator ready at {restarted:?}; the same 2 of 20 held over {polls} polls; step 2 at {step_two:?} (pause {pause:?})"
    );
    assert!(
        step_two >= pause,
        "the pause counted from the step's start, not the restart: {step_two:?}"
    );
    assert!(
        step_two < restarted + pause,
        "the pause went on from where it was, not from the restart: {step_two:?}"
    );
}

#[test]
fn a_staged_rollout_moves_ten_percent_of_the_databases_until_the_pause_ends_then_all() {
    install_crds();
    let ns = Namespace::new("rollout-steps");
    let pause = Duration::from_secs(20);
    let mut rules = Mount::new(&staged_database_rules(pause));
    let template_files = files_under(&root().join("templates"));
    let mut templates = Mount::new(&template_files);
    let _operator = Operator::start_with(rules.path(), templates.path(), &ns.0, RELOAD_FLAGS);
    let databases: Vec<String> = (0..20).map(|i| database(&format!("db-{i}"), 1, "")).collect();
    apply_yaml(&ns.0, &databases.join("\n---\n"));
    wait_until(Duration::from_secs(60), "20 Services", || {
        services_by_edition(&ns.0, 1).1 == 20
    });
    wait_until(Duration::from_secs(30), "20 Databases recording revision 1", || {
        databases_by_revision(&ns.0) == BTreeMap::from([(1, 20)])
    });

    let mark = AuditMark::now();
    let edited = Instant::now();
    templates.swap(&edit_service_template(&template_files, 1));
    wait_until(Duration::from_secs(30), "2 Services of the new template", || {
        services_by_edition(&ns.0, 1).0 == 2
    });
    let first_two = edited.elapsed();
    // The moved parents' status names the revision that changed them, in the same reconcile.
    wait_until(Duration::from_secs(30), "2 Databases recording revision 2", || {
        databases_by_revision(&ns.0).get(&2) == Some(&2)
    });
    let mut polls = 0;
    wait_until(pause + Duration::from_secs(30), "the first step's pause to end", || {
        // The Services first: the step is recorded before any parent of the next step moves,
        // so a state read afterwards that still says step 1 means they were read during it.
        let (new, old) = services_by_edition(&ns.0, 1);
        let recorded = databases_by_revision(&ns.0);
        if rollout_state(&ns.0, "database").contains("step: 2 of 2") {
            return true;
        }
        // Until the next step begins, by the API server's objects: 2 new and 18 old.
        assert_eq!((new, old), (2, 18), "during the first step's pause");
        assert_eq!(
            recorded,
            BTreeMap::from([(1, 18), (2, 2)]),
            "status.ruleopRevision during the first step's pause"
        );
        polls += 1;
        false
    });
    let step_two = edited.elapsed();
    wait_until(Duration::from_secs(60), "all 20 Services of the new template", || {
        services_by_edition(&ns.0, 1) == (20, 0)
    });
    let all = edited.elapsed();
    eprintln!(
        "edit -> 2 of 20 moved {first_two:?}; held 2 new / 18 old over {polls} polls; next step at {step_two:?}; all 20 at {all:?}"
    );
    assert!(step_two >= pause, "the next step began after the pause: {step_two:?}");
    wait_until(Duration::from_secs(30), "the rollout to complete", || {
        rollout_state(&ns.0, "database").contains("phase: Complete")
    });
    let service_writes = |mark: &AuditMark| mark.ruleop_writes(&ns.0, &["services"]).len();
    wait_until(
        Duration::from_secs(10),
        "the audit log to show the staged writes",
        || service_writes(&mark) >= 20,
    );
    wait_until(Duration::from_secs(30), "20 Databases recording revision 2", || {
        databases_by_revision(&ns.0) == BTreeMap::from([(2, 20)])
    });
    let staged = mark.ruleop_writes(&ns.0, PARENT_AND_CHILDREN);

    // The same edit unstaged: the shipped rules (no rollout), then the next edition.
    rules.swap(&files_under(&root().join("rules")));
    wait_until(Duration::from_secs(30), "the rules without rollout in force", || {
        revisions_line(&ns.0).lines().any(|l| l == "database: 3")
    });
    let unstaged_mark = AuditMark::now();
    templates.swap(&edit_service_template(&template_files, 2));
    wait_until(Duration::from_secs(30), "all 20 Services of the next template", || {
        services_by_edition(&ns.0, 2).0 == 20
    });
    wait_until(
        Duration::from_secs(10),
        "the audit log to show the unstaged writes",
        || service_writes(&unstaged_mark) >= 20,
    );
    let unstaged = unstaged_mark.ruleop_writes(&ns.0, PARENT_AND_CHILDREN);
    let status_writes = |writes: &[crate::support::audit::AuditedWrite]| {
        writes.iter().filter(|w| w.resource == "databases/status").count()
    };
    eprintln!(
        "writes to the parents and their children: staged rollout {} ({} status), unstaged reload {} ({} status)",
        staged.len(),
        status_writes(&staged),
        unstaged.len(),
        status_writes(&unstaged)
    );
    // What recording the revision costs: one status write per parent whose children it changed
    // (the Service edit changes no status), beside the children's writes an unstaged reload makes.
    assert_eq!(
        staged.len() - status_writes(&staged),
        unstaged.len() - status_writes(&unstaged),
        "a staged rollout writes the children an unstaged reload writes"
    );
    assert_eq!(
        status_writes(&staged),
        status_writes(&unstaged) + 20,
        "one status write per moved Database records its revision:{}",
        crate::support::audit::listing(&staged)
    );
}

/// The kinds a Database and its children are, for counting writes.
const PARENT_AND_CHILDREN: &[&str] = &[
    "databases",
    "services",
    "statefulsets",
    "persistentvolumeclaims",
    "jobs",
];

/// `(name -> resourceVersion, name -> data.edition)` of the ConfigMaps `*-cm` in `ns`.
pub(crate) fn config_maps(ns: &str) -> (BTreeMap<String, String>, BTreeMap<String, String>) {
    let listed: serde_json::Value =
        serde_json::from_str(&kubectl_ok(&["get", "configmaps", "-n", ns, "-o", "json"])).expect("JSON");
    let mut versions = BTreeMap::new();
    let mut editions = BTreeMap::new();
    for cm in listed["items"].as_array().expect("items") {
        let name = cm["metadata"]["name"].as_str().unwrap_or_default().to_owned();
        if !name.ends_with("-cm") {
            continue;
        }
        versions.insert(
            name.clone(),
            cm["metadata"]["resourceVersion"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
        );
        editions.insert(name, cm["data"]["edition"].as_str().unwrap_or_default().to_owned());
    }
    (versions, editions)
}

/// Rule `shop`: one ConfigMap per parent, ready while its `healthy` is `yes`, rolled out 10% then
/// 100% with `pause`; `extra` is more of `spec.rollout` (indented four spaces).
fn shop_rule(kind: &CustomKind, pause: Duration, extra: &str) -> Vec<(String, String)> {
    shop_rule_in_steps(kind, 10, pause, extra)
}

/// [`shop_rule`] with a first step of `percent`.
pub(crate) fn shop_rule_in_steps(
    kind: &CustomKind,
    percent: u32,
    pause: Duration,
    extra: &str,
) -> Vec<(String, String)> {
    let rule = format!(
        "apiVersion: ruleop.io/v1alpha1\nkind: Rule\nmetadata:\n  name: shop\nspec:\n  watch:\n    apiVersion: {}\n    kind: Shop\n  children:\n    - id: cm\n      apiVersion: v1\n      kind: ConfigMap\n      template: shop/cm.yaml.j2\n      readyWhen: object.data.healthy == \"yes\"\n  rollout:\n    steps:\n      - {{percent: {percent}, pause: {}s}}\n      - {{percent: 100}}\n{extra}",
        kind.api_version(),
        pause.as_secs()
    );
    vec![("shop.yaml".to_owned(), rule)]
}

/// The shop ConfigMap's template, of `edition`, with `healthy`.
pub(crate) fn shop_template(edition: u32, healthy: &str) -> Vec<(String, String)> {
    vec![(
        "shop/cm.yaml.j2".to_owned(),
        format!(
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{{{ metadata.name }}}}-cm\ndata:\n  edition: \"{edition}\"\n  healthy: \"{healthy}\"\n"
        ),
    )]
}

/// The objects of `kind` in `ns`, as JSON.
pub(crate) fn listed(kind: &CustomKind, ns: &str) -> Vec<serde_json::Value> {
    let list: serde_json::Value =
        serde_json::from_str(&kubectl_ok(&["get", &kind.resource(), "-n", ns, "-o", "json"])).expect("JSON");
    list["items"].as_array().cloned().unwrap_or_default()
}

/// How many objects of `kind` in `ns` are Ready=True.
pub(crate) fn ready_count(kind: &CustomKind, ns: &str) -> usize {
    listed(kind, ns)
        .iter()
        .filter(|shop| {
            shop["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"))
        })
        .count()
}

/// Creates 20 Shops in `ns` and waits until they are Ready.
pub(crate) fn twenty_ready_shops(kind: &CustomKind, ns: &str) {
    for i in 0..20 {
        kubectl_with_stdin(
            &["apply", "-n", ns, "-f", "-"],
            Some(&kind.object(&format!("shop-{i}"), "{}")),
        );
    }
    wait_until(Duration::from_secs(60), "20 Shops Ready", || {
        ready_count(kind, ns) == 20
    });
}

/// 20 Ready Shops of a kind of their own, under rule `shop` rolled out 10% then 100%.
struct Shops {
    kind: CustomKind,
    ns: Namespace,
    /// The shop template's mount, swapped to edit it.
    templates: Mount,
    operator: Operator,
    _rules: Mount,
}

impl Shops {
    /// For test `test` (its kind and namespace), with `pause` and `extra` more of `spec.rollout`.
    fn start(test: &str, pause: Duration, extra: &str) -> Shops {
        let kind = CustomKind::new(test, "Shop");
        kind.install();
        let ns = Namespace::new(test);
        let rules = Mount::new(&shop_rule(&kind, pause, extra));
        let templates = Mount::new(&shop_template(1, "yes"));
        let operator = Operator::start_with(rules.path(), templates.path(), &ns.0, RELOAD_FLAGS);
        twenty_ready_shops(&kind, &ns.0);
        Shops {
            kind,
            ns,
            templates,
            operator,
            _rules: rules,
        }
    }
}

#[test]
fn with_on_failure_rollback_a_halted_rollout_moves_its_parents_back() {
    let Shops {
        kind,
        ns,
        mut templates,
        operator: _operator,
        _rules,
    } = Shops::start("rollout-back", Duration::from_secs(15), "    onFailure: rollback\n");
    templates.swap(&shop_template(2, "no"));
    wait_until(Duration::from_secs(30), "the rollout to be rolled back", || {
        rollout_state(&ns.0, "shop").contains("phase: RolledBack")
    });
    wait_until(
        Duration::from_secs(30),
        "every ConfigMap back on the first template",
        || config_maps(&ns.0).1.values().all(|edition| edition == "1"),
    );
    wait_until(Duration::from_secs(30), "20 Shops Ready again", || {
        ready_count(&kind, &ns.0) == 20
    });
    kind.uninstall();
}

#[test]
fn a_change_that_makes_moved_parents_unready_halts_the_rollout_and_the_others_are_never_written() {
    let pause = Duration::from_secs(15);
    let Shops {
        kind,
        ns,
        mut templates,
        operator,
        _rules,
    } = Shops::start("rollout-halt", pause, "");
    let (before, _) = config_maps(&ns.0);
    assert_eq!(before.len(), 20);

    let edited = Instant::now();
    templates.swap(&shop_template(2, "no"));
    wait_until(Duration::from_secs(30), "the rollout to halt", || {
        rollout_state(&ns.0, "shop").contains("phase: Halted")
    });
    let halted = edited.elapsed();
    let state = rollout_state(&ns.0, "shop");
    assert!(state.contains("failed:\n") && state.contains("Ready False"), "{state}");
    // Past the end of the first step's pause, the 18 unmoved ConfigMaps are still as they were.
    wait_until(
        pause + Duration::from_secs(30),
        "the first step's pause to have ended",
        || {
            let (now, editions) = config_maps(&ns.0);
            let moved: Vec<&String> = editions.iter().filter(|(_, e)| *e == "2").map(|(n, _)| n).collect();
            assert_eq!(
                moved.len(),
                2,
                "exactly the 2 moved parents have the new template: {editions:?}"
            );
            let rewritten: Vec<&String> = now
                .iter()
                .filter(|(name, version)| !moved.contains(name) && before.get(*name) != Some(*version))
                .map(|(name, _)| name)
                .collect();
            assert!(rewritten.is_empty(), "unmoved ConfigMaps written: {rewritten:?}");
            edited.elapsed() > pause + Duration::from_secs(2)
        },
    );
    assert_eq!(
        ready_count(&kind, &ns.0),
        18,
        "the 2 moved Shops are not Ready, the 18 others are"
    );
    assert_eq!(operator.metric("ruleop_rollout_halts_total", &[("rule", "shop")]), 1);
    let halts = events(&ns.0, "reason=RolloutHalted", "{.items[*].metadata.name}");
    assert_eq!(halts.split_whitespace().count(), 1, "one RolloutHalted Event");
    assert!(rollout_state(&ns.0, "shop").contains("phase: Halted"), "still halted");
    let (code, status) = rollout_command(&ns.0, &["status", "shop"]);
    assert_eq!(code, Some(1), "a halted rollout exits 1: {status}");
    assert!(
        status.contains("phase: Halted") && status.contains("Ready False"),
        "{status}"
    );
    eprintln!("edit -> halted at the first step in {halted:?}:\n{state}");
    kind.uninstall();
}

/// How many Shops in `ns` record each revision in `status.ruleopRevision` (`0`: none).
fn shops_by_revision(kind: &CustomKind, ns: &str) -> BTreeMap<u64, usize> {
    let mut counts = BTreeMap::new();
    for shop in listed(kind, ns) {
        *counts
            .entry(shop["status"]["ruleopRevision"].as_u64().unwrap_or(0))
            .or_default() += 1;
    }
    counts
}

/// How many shop ConfigMaps in `ns` have each edition.
pub(crate) fn editions(ns: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for edition in config_maps(ns).1.into_values() {
        *counts.entry(edition).or_default() += 1;
    }
    counts
}

/// Runs `ruleop rollout <args>` and asserts its exit code and that its output says each of `says`.
fn rollout_says(ns: &str, args: &[&str], code: i32, says: &[&str]) {
    let (got, out) = rollout_command(ns, args);
    assert_eq!(got, Some(code), "ruleop rollout {args:?}: {out}");
    for said in says {
        assert!(out.contains(said), "ruleop rollout {args:?} says {said:?}: {out}");
    }
}

fn counts(entries: &[(&str, usize)]) -> BTreeMap<String, usize> {
    entries.iter().map(|(e, n)| ((*e).to_owned(), *n)).collect()
}

#[test]
fn pause_holds_a_rollout_at_its_step_resume_lets_it_finish_and_undo_puts_every_parent_back() {
    let pause = Duration::from_secs(8);
    let mut shops = Shops::start("rollout-ctl", pause, "");
    let (kind, ns) = (&shops.kind, &shops.ns);

    // Located refusals, before anything is asked of the operator.
    rollout_says(
        &ns.0,
        &["pause", "nosuch"],
        2,
        &["rule \"nosuch\" is not in force", "shop"],
    );
    rollout_says(&ns.0, &["pause", "shop"], 2, &["no rollout is in progress"]);
    rollout_says(&ns.0, &["undo", "shop"], 2, &["no revision before 1 is kept"]);

    shops.templates.swap(&shop_template(2, "yes"));
    wait_until(Duration::from_secs(30), "2 ConfigMaps of the new template", || {
        editions(&ns.0).get("2") == Some(&2)
    });
    let paused_at = Instant::now();
    rollout_says(
        &ns.0,
        &["pause", "shop"],
        0,
        &["phase: Halted", "note: paused by ruleop rollout pause"],
    );
    // Past the end of the first step's pause, by the API server's objects: still 2 and 18.
    wait_until(
        pause + Duration::from_secs(30),
        "the first step's pause to have ended",
        || {
            assert_eq!(editions(&ns.0), counts(&[("1", 18), ("2", 2)]), "while paused");
            paused_at.elapsed() > pause + Duration::from_secs(2)
        },
    );
    let state = rollout_state(&ns.0, "shop");
    assert!(
        state.contains("step: 1 of 2") && state.contains("phase: Halted"),
        "{state}"
    );
    // A paused rollout is no failure; resume without RULE is the one rollout in progress.
    rollout_says(&ns.0, &["status", "shop"], 0, &["phase: Halted"]);
    rollout_says(&ns.0, &["resume"], 0, &["phase: Progressing", "note: resumed"]);
    wait_until(
        pause + Duration::from_secs(30),
        "every ConfigMap on the new template",
        || editions(&ns.0) == counts(&[("2", 20)]),
    );
    wait_until(Duration::from_secs(30), "the rollout to complete", || {
        rollout_state(&ns.0, "shop").contains("phase: Complete")
    });
    wait_until(Duration::from_secs(30), "20 Shops recording revision 2", || {
        shops_by_revision(kind, &ns.0) == BTreeMap::from([(2, 20)])
    });
    rollout_says(&ns.0, &["resume", "shop"], 2, &["no rollout is in progress"]);

    // Undo with no rollout in progress: revision 1 again, by the API server's objects.
    rollout_says(
        &ns.0,
        &["undo", "shop"],
        0,
        &["from: 1\n  to: 2", "phase: RolledBack", "note: undone"],
    );
    wait_until(
        Duration::from_secs(30),
        "every ConfigMap back on the first template",
        || editions(&ns.0) == counts(&[("1", 20)]),
    );
    wait_until(Duration::from_secs(30), "20 Shops recording revision 1", || {
        shops_by_revision(kind, &ns.0) == BTreeMap::from([(1, 20)])
    });
    let requests = kubectl_ok(&[
        "get",
        "configmaps",
        "-n",
        &ns.0,
        "-l",
        "ruleop.io/rollout-request",
        "-o",
        "name",
    ]);
    assert!(requests.trim().is_empty(), "every request was let go: {requests}");

    // Until the files change again: the next edit rolls out from the undone-to revision.
    shops.templates.swap(&shop_template(3, "yes"));
    wait_until(Duration::from_secs(30), "2 ConfigMaps of the third template", || {
        editions(&ns.0).get("3") == Some(&2)
    });
    let state = rollout_state(&ns.0, "shop");
    assert!(state.contains("from: 1\nto: 3"), "{state}");
    assert_eq!(
        editions(&ns.0),
        counts(&[("1", 18), ("3", 2)]),
        "the unmoved parents stay on the revision undo put them on"
    );

    // A hand-written request that is not one: refused with an Event, let go, nothing changed.
    let state = rollout_state(&ns.0, "shop");
    let garbage = format!(
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ruleop-rollout-shop\n  labels: {{ruleop.io/rollout-request: shop}}\ndata: {{command: stop, revision: \"{}\"}}\n",
        "9".repeat(1000)
    );
    apply_yaml(&ns.0, &garbage);
    wait_until(Duration::from_secs(30), "the garbage request to be let go", || {
        !exists(&ns.0, "configmap/ruleop-rollout-shop")
    });
    wait_until(Duration::from_secs(30), "a RolloutRequestRefused Event", || {
        events(&ns.0, "reason=RolloutRequestRefused", "{.items[*].message}")
            .contains("command \"stop\" is not pause, resume or undo")
    });
    assert_eq!(rollout_state(&ns.0, "shop"), state, "a refused request changes nothing");
    kind.uninstall();
}

/// A Shop named `name` in `ns` with `ruleop.io/revision: <pin>`.
fn pinned_shop(kind: &CustomKind, ns: &str, name: &str, pin: &str) {
    let object = serde_json::json!({
        "apiVersion": kind.api_version(),
        "kind": "Shop",
        "metadata": {"name": name, "annotations": {"ruleop.io/revision": pin}},
        "spec": {},
    });
    kubectl_with_stdin(&["apply", "-n", ns, "-f", "-"], Some(&object.to_string()));
}

/// `(status, reason, message)` of Shop `name`'s Ready condition.
fn shop_ready(kind: &CustomKind, ns: &str, name: &str) -> (String, String, String) {
    let shop: serde_json::Value =
        serde_json::from_str(&kubectl_ok(&["get", &kind.resource(), "-n", ns, name, "-o", "json"])).expect("JSON");
    let ready = shop["status"]["conditions"]
        .as_array()
        .and_then(|c| c.iter().find(|c| c["type"] == "Ready").cloned())
        .unwrap_or_default();
    let field = |key: &str| ready[key].as_str().unwrap_or_default().to_owned();
    (field("status"), field("reason"), field("message"))
}

#[test]
fn a_parent_pinned_to_a_kept_revision_stays_on_it_and_a_hostile_pin_costs_only_its_parent() {
    let kind = CustomKind::new("rollout-pin", "Shop");
    kind.install();
    let ns = Namespace::new("rollout-pin");
    let rules = Mount::new(&shop_rule(&kind, Duration::from_secs(1), ""));
    let mut templates = Mount::new(&shop_template(1, "yes"));
    let _operator = Operator::start_with(rules.path(), templates.path(), &ns.0, RELOAD_FLAGS);
    for name in ["free-a", "free-b", "free-c"] {
        kubectl_with_stdin(&["apply", "-n", &ns.0, "-f", "-"], Some(&kind.object(name, "{}")));
    }
    pinned_shop(&kind, &ns.0, "pinned", "1");
    let huge = "9".repeat(100_000);
    let hostile = [
        ("garbage", "latest", "InvalidRevisionPin"),
        ("negative", "-1", "InvalidRevisionPin"),
        ("overflow", "18446744073709551616", "InvalidRevisionPin"),
        ("huge", huge.as_str(), "InvalidRevisionPin"),
        ("missing", "999", "RevisionNotKept"),
        ("zero", "0", "RevisionNotKept"),
    ];
    for (name, pin, _) in &hostile {
        pinned_shop(&kind, &ns.0, name, pin);
    }
    wait_until(Duration::from_secs(60), "the four good Shops Ready", || {
        ready_count(&kind, &ns.0) == 4
    });
    templates.swap(&shop_template(2, "yes"));
    wait_until(Duration::from_secs(60), "the rollout of revision 2 to complete", || {
        rollout_state(&ns.0, "shop").contains("phase: Complete")
    });
    wait_until(Duration::from_secs(30), "the free Shops on revision 2", || {
        let (_, editions) = config_maps(&ns.0);
        ["free-a-cm", "free-b-cm", "free-c-cm"]
            .iter()
            .all(|cm| editions.get(*cm).map(String::as_str) == Some("2"))
    });
    // The pinned parent keeps revision 1's template, by the API server's objects, also once the
    // revision is no longer loaded beside the one in force: its child, deleted after the rollout
    // ended, is made again from revision 1 served from its kept ConfigMap.
    assert_eq!(config_maps(&ns.0).1.get("pinned-cm").map(String::as_str), Some("1"));
    kubectl_ok(&["delete", "configmap", "-n", &ns.0, "pinned-cm"]);
    wait_until(
        Duration::from_secs(30),
        "the pinned Shop's ConfigMap made again",
        || config_maps(&ns.0).1.contains_key("pinned-cm"),
    );
    let (_, editions) = config_maps(&ns.0);
    assert_eq!(editions.get("pinned-cm").map(String::as_str), Some("1"), "{editions:?}");
    assert_eq!(
        shops_by_revision(&kind, &ns.0).get(&1),
        Some(&1),
        "the pinned Shop records revision 1"
    );
    assert_eq!(shop_ready(&kind, &ns.0, "pinned").0, "True");
    for (name, _, reason) in &hostile {
        let (status, got, message) = shop_ready(&kind, &ns.0, name);
        assert_eq!((status.as_str(), got.as_str()), ("False", *reason), "{name}: {message}");
        assert!(
            message.contains("ruleop.io/revision") && message.len() < 400,
            "{name}: a short message naming the annotation: {message}"
        );
        assert!(
            !editions.contains_key(&format!("{name}-cm")),
            "{name}: nothing is applied under a pin that cannot be followed"
        );
    }
    let (_, _, message) = shop_ready(&kind, &ns.0, "missing");
    assert!(message.contains("kept: 1, 2"), "names the kept revisions: {message}");

    // Unpinned, it moves to the revision in force.
    kubectl_ok(&[
        "annotate",
        "-n",
        &ns.0,
        &kind.resource(),
        "pinned",
        "ruleop.io/revision-",
    ]);
    wait_until(Duration::from_secs(30), "the unpinned Shop on revision 2", || {
        config_maps(&ns.0).1.get("pinned-cm").map(String::as_str) == Some("2")
    });
    kind.uninstall();
}
