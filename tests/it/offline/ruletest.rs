//! `ruleop test` as a rule author runs it: the shipped RuleTests pass, a failing case names its
//! file:line and the first mismatch with expected vs actual, exit codes, JUnit XML.

use std::path::Path;
use std::process::{Command, Output};

fn ruleop_in(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ruleop"))
        .args(args)
        .current_dir(dir)
        .env_remove("RULEOP_RULES")
        .env_remove("RULEOP_TEMPLATES")
        .env_remove("RULEOP_JUNIT")
        .output()
        .expect("ruleop runs")
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A directory with the shipped rules and templates and `tests/t.yaml` holding `cases`.
fn project(cases: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for tree in [
        "rules",
        "templates/database",
        "templates/cache",
        "templates/tenant",
        "examples",
    ] {
        std::fs::create_dir_all(dir.path().join(tree)).expect("mkdir");
        for entry in std::fs::read_dir(root().join(tree)).expect("read").flatten() {
            if entry.path().is_file() {
                std::fs::copy(entry.path(), dir.path().join(tree).join(entry.file_name())).expect("copy");
            }
        }
    }
    std::fs::create_dir_all(dir.path().join("tests")).expect("mkdir");
    let doc =
        format!("apiVersion: ruleop.io/v1alpha1\nkind: RuleTest\nmetadata: {{name: t}}\nspec:\n  cases:\n{cases}");
    std::fs::write(dir.path().join("tests/t.yaml"), doc).expect("write");
    dir
}

#[test]
fn the_shipped_rule_tests_pass() {
    let out = ruleop_in(root(), &["test", "tests/ruletests"]);
    let stdout = text(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stdout}{}", text(&out.stderr));
    assert!(stdout.contains(" 0 failed"), "{stdout}");
    assert!(!stdout.contains("FAIL"), "{stdout}");
}

#[test]
fn a_failing_case_names_its_line_and_the_first_mismatch_with_expected_and_actual() {
    let dir = project(
        r#"    - name: the service port is 5433
      parentFile: ../examples/database.yaml
      expect:
        children:
          - kind: Service
            name: orders-svc
            fields: {spec: {ports: [{port: 5432, targetPort: 5433}]}}
    - name: ports are matched by their merge key, not by position
      parentFile: ../examples/database.yaml
      expect:
        children: [{kind: Service, name: orders-svc, fields: {spec: {ports: [{port: 80}]}}}]
        counts: {StatefulSet: 2}
    - name: the backup is skipped
      parentFile: ../examples/database.yaml
      expect:
        actions: {backup: {run: false}}
        status: {conditions: [{type: Ready, status: "True"}]}
        prune: [{kind: StatefulSet, name: orders}]
    - name: an expected render error that does not happen
      parentFile: ../examples/database.yaml
      expect:
        error: {contains: not safe, at: database/statefulset.yaml.j2:20}
    - name: this one passes
      parentFile: ../examples/database.yaml
      expect:
        absent: [{kind: Service, name: orders}]
"#,
    );
    let junit = dir.path().join("junit.xml");
    let out = ruleop_in(dir.path(), &["test", "--junit", junit.to_str().expect("utf-8 path")]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stderr));
    insta::assert_snapshot!(text(&out.stdout));
    let xml = std::fs::read_to_string(&junit).expect("junit written");
    assert!(
        xml.contains(r#"<testsuites name="ruleop test" tests="5" failures="4">"#),
        "{xml}"
    );
    assert!(
        xml.contains(r#"<failure message="children[Service orders-svc].spec.ports[port=5432].targetPort: expected 5433, got 5432">"#),
        "{xml}"
    );
    assert!(
        xml.contains(r#"name="this one passes" file="tests/t.yaml" line="28""#),
        "{xml}"
    );
}

#[test]
fn a_broken_test_file_fails_with_its_location_and_the_other_files_still_run() {
    let dir = project("    - name: fine\n      parentFile: ../examples/cache.yaml\n      expect: {}\n");
    std::fs::write(
        dir.path().join("tests/broken.yaml"),
        "apiVersion: ruleop.io/v1alpha1\nkind: RuleTest\nmetadata: {name: b}\nspec:\n  cases:\n    - name: x\n      parent: {}\n      expects: {}\n",
    )
    .expect("write");
    let out = ruleop_in(dir.path(), &["test"]);
    assert_eq!(out.status.code(), Some(1));
    insta::assert_snapshot!(text(&out.stdout));
}

#[test]
fn nothing_to_run_and_invalid_rules_exit_2() {
    let dir = project("    - name: fine\n      parentFile: ../examples/cache.yaml\n      expect: {}\n");
    let out = ruleop_in(dir.path(), &["test", "rules"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out.stderr).contains("error: no RuleTest cases found in rules"),
        "{}",
        text(&out.stderr)
    );
    std::fs::write(dir.path().join("rules/bad.yaml"), "kind: Rule\n").expect("write");
    let out = ruleop_in(dir.path(), &["test"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no test was run"), "{}", text(&out.stderr));
}

#[test]
fn collections_lookups_and_dependencies_are_testable() {
    let dir = project(
        r#"    - name: one Service per port, the settings wait for the config, the lookup is read
      parent:
        apiVersion: example.com/v1
        kind: App
        metadata: {name: shop, namespace: prod}
        spec: {ports: [{name: http, port: 80}, {name: grpc, port: 9090}]}
      lookups:
        - {apiVersion: v1, kind: ConfigMap, metadata: {name: platform, namespace: platform}, data: {color: blue}}
      expect:
        counts: {Service: 2, ConfigMap: 1}
        children:
          - {kind: Service, name: shop-grpc, id: port, fields: {spec: {ports: [{port: 9090, name: grpc}]}}}
          - {kind: ConfigMap, name: shop-config, fields: {data: {color: blue}}}
        waiting: [settings]
        status: {conditions: [{type: Ready, status: "False", reason: ChildNotReady}]}
    - name: two ports with one name are refused at the forEach
      parent:
        apiVersion: example.com/v1
        kind: App
        metadata: {name: shop, namespace: prod}
        spec: {ports: [{name: http, port: 80}, {name: http, port: 81}]}
      expect:
        error: {contains: http, at: rules/app.yaml:9, reason: InvalidForEach}
"#,
    );
    std::fs::write(
        dir.path().join("rules/app.yaml"),
        r#"apiVersion: ruleop.io/v1alpha1
kind: Rule
metadata: {name: app}
spec:
  watch: {apiVersion: example.com/v1, kind: App}
  lookups:
    - {id: platform, apiVersion: v1, kind: ConfigMap, name: platform, namespace: platform}
  children:
    - {id: port, apiVersion: v1, kind: Service, template: app/port.yaml.j2, forEach: spec.ports, key: "{{ item.name }}"}
    - {id: config, apiVersion: v1, kind: ConfigMap, template: app/config.yaml.j2, readyWhen: "object.data | dig('ready') == 'yes'"}
    - {id: settings, apiVersion: v1, kind: Secret, template: app/settings.yaml.j2, dependsOn: [config]}
"#,
    )
    .expect("write rule");
    std::fs::create_dir_all(dir.path().join("templates/app")).expect("mkdir");
    for (name, text) in [
        (
            "port.yaml.j2",
            "apiVersion: v1\nkind: Service\nmetadata:\n  name: {{ metadata.name }}-{{ item_key }}\nspec:\n  ports:\n    - name: {{ item.name }}\n      port: {{ item.port }}\n",
        ),
        (
            "config.yaml.j2",
            "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: {{ metadata.name }}-config\ndata:\n  color: {{ lookups.platform | dig('data.color', 'none') }}\n",
        ),
        (
            "settings.yaml.j2",
            "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ metadata.name }}-settings\n",
        ),
    ] {
        std::fs::write(dir.path().join("templates/app").join(name), text).expect("write template");
    }
    let out = ruleop_in(dir.path(), &["test"]);
    assert_eq!(out.status.code(), Some(0), "{}{}", text(&out.stdout), text(&out.stderr));
    assert_eq!(
        text(&out.stdout),
        "PASS tests/t.yaml:6: one Service per port, the settings wait for the config, the lookup is read\n\
         PASS tests/t.yaml:21: two ports with one name are refused at the forEach\n\
         2 passed, 0 failed\n"
    );
}
