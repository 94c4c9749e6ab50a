//! `ruleop console` against the real control plane, loaded in a real browser (Debian's chromium,
//! headless, installed by scripts/chromium.sh): the rules page with the failing parent's template
//! line, a rule's parents filtered and paged, and a Database's trace as a graph of its children
//! with their states, with no Secret data anywhere; the JSON API is the `trace -o json` model;
//! anything but GET is refused, and `ruleop run` serves no console.

use std::process::Command;
use std::time::Duration;

use crate::support::console::{Console, chromium, dom, headless, request, request_for_host};
use crate::support::*;
use serde_json::Value;

const WAIT: Duration = Duration::from_secs(60);

#[test]
fn a_database_tree_in_headless_chromium_shows_rules_parents_children_and_the_template_line() {
    let ns = Namespace::new("console-db");
    install_crds();
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    apply_yaml(&ns.0, &database("orders", 1, "  backup:\n    enabled: true\n"));
    apply_yaml(&ns.0, &database("broken", 1, "    className: \"fast: ssd\"\n"));
    wait_until(WAIT, "orders reconciled and broken failing", || {
        get(&ns.0, "database/orders", "{.status.actions.backup.phase}") == "Done"
            && get(
                &ns.0,
                "database/broken",
                "{.status.conditions[?(@.type==\"Ready\")].reason}",
            ) == "RenderFailed"
    });
    operator.idle_reconciles("database");
    assert!(operator.stop(), "the operator exits cleanly");
    let console = Console::start();

    // Rules, with the failing parent's message naming the template line.
    let home = dom(&format!("{}/?namespace={}", console.url, ns.0));
    assert!(home.contains(r#"data-rule="database""#), "{home}");
    let failing = format!(r#"data-failing="{}/broken""#, ns.0);
    assert!(home.contains(&failing), "{home}");
    assert!(home.contains("database/statefulset.yaml.j2:56"), "{home}");

    // Parents of the rule in the namespace, then only the not Ready ones.
    let parents = dom(&format!("{}/rules/database?namespace={}", console.url, ns.0));
    for name in ["orders", "broken"] {
        assert!(
            parents.contains(&format!(r#"data-parent="{}/{name}""#, ns.0)),
            "{parents}"
        );
    }
    assert!(parents.contains("2 parents, page 1 of 1"), "{parents}");

    // The trace: the parent and its children as a graph, with their states.
    let url = format!("{}/trace?rule=database&namespace={}&name=orders", console.url, ns.0);
    let trace = dom(&url);
    assert!(trace.contains(r#"data-node="parent""#), "{trace}");
    for (child, state) in [("service", "ready"), ("statefulset", "ready"), ("backups", "ready")] {
        let node = format!(r#"data-child="{child}" data-state="{state}""#);
        assert!(trace.contains(&node), "{node} in {trace}");
    }
    assert!(trace.contains(r#"data-action="backup""#), "{trace}");
    assert!(trace.contains(r#"data-condition="Ready""#), "{trace}");
    assert!(
        !trace.contains("test-password") && !home.contains("test-password") && !parents.contains("test-password"),
        "no Secret data"
    );

    // The broken parent's page shows the plan error with its file and line.
    let broken = dom(&format!(
        "{}/trace?rule=database&namespace={}&name=broken",
        console.url, ns.0
    ));
    assert!(broken.contains(r#"id="plan-error""#), "{broken}");
    assert!(broken.contains("database/statefulset.yaml.j2:56"), "{broken}");

    // The JSON under the page is the `ruleop trace -o json` model.
    let (code, body) = request(
        &console.url,
        "GET",
        &format!("/api/trace?rule=database&namespace={}&name=orders", ns.0),
    );
    assert_eq!(code, 200, "{body}");
    let api: Value = serde_json::from_str(&body).expect("JSON");
    let cli = ruleop_command(
        &["trace", "database/orders", "-n", &ns.0, "-o", "json"],
        &root().join("rules"),
        &templates(),
    );
    let cli: Value = serde_json::from_slice(&cli.stdout).expect("trace -o json");
    assert_eq!(api["children"], cli["children"]);
    assert_eq!(api["parent"], cli["parent"]);

    // A screenshot of the tree (the one in docs/operations/console.md was taken the same way).
    let shot = root().join("target/console-database.png");
    let profile = tempfile::tempdir().expect("profile dir");
    let out = Command::new(chromium())
        .args(headless(profile.path()))
        .args(["--window-size=1100,900", "--hide-scrollbars"])
        .arg(format!("--screenshot={}", shot.display()))
        .arg(&url)
        .output()
        .expect("chromium runs");
    assert!(out.status.success(), "{}", text(&out.stderr));
    let png = std::fs::read(&shot).expect("the screenshot");
    assert!(png.starts_with(b"\x89PNG"), "a PNG");
}

#[test]
fn parents_are_paged_and_filtered_by_ready() {
    let ns = Namespace::new("console-pages");
    install_crds();
    // No operator: none of them has a Ready condition yet.
    let many: Vec<String> = (0..55).map(|i| database(&format!("db-{i:02}"), 0, "")).collect();
    apply_yaml(&ns.0, &many.join("\n---\n"));
    let console = Console::start();
    let page = |query: &str| {
        let (code, body) = request(
            &console.url,
            "GET",
            &format!("/api/rules/database/parents?namespace={}{query}", ns.0),
        );
        assert_eq!(code, 200, "{body}");
        serde_json::from_str::<Value>(&body).expect("JSON")
    };
    let first = page("");
    assert_eq!((first["total"].as_u64(), first["pages"].as_u64()), (Some(55), Some(2)));
    assert_eq!(first["items"].as_array().map(Vec::len), Some(50));
    assert_eq!(first["items"][0]["name"], "db-00");
    let second = page("&page=2");
    assert_eq!(second["items"].as_array().map(Vec::len), Some(5));
    assert_eq!(second["items"][4]["name"], "db-54");
    assert_eq!(page("&ready=None")["total"], 55);
    assert_eq!(page("&ready=True")["total"], 0);

    let html = dom(&format!("{}/rules/database?namespace={}&page=2", console.url, ns.0));
    assert!(html.contains("55 parents, page 2 of 2"), "{html}");
    assert!(
        html.contains(r#"id="prev""#) && !html.contains(r#"id="next""#),
        "{html}"
    );
}

#[test]
fn the_console_answers_get_only_for_its_own_hosts_and_ruleop_run_serves_none() {
    let ns = Namespace::new("console-off");
    install_crds();
    let console = Console::start();
    for method in ["POST", "PUT", "PATCH", "DELETE"] {
        for path in ["/", "/api/trace?rule=database&namespace=x&name=y", "/rules/database"] {
            let (code, _) = request(&console.url, method, path);
            assert_eq!(code, 405, "{method} {path}");
        }
    }
    // Issue 48, item 7: a request naming another site's host (DNS rebinding) is refused; the
    // loopback names and the bound address are answered.
    let port = console.url.rsplit(':').next().unwrap_or_default();
    for host in [
        "rebind.attacker.example",
        &format!("rebind.attacker.example:{port}"),
        "",
    ] {
        for path in ["/api/status", "/api/trace?rule=database&namespace=x&name=y", "/"] {
            let (code, body) = request_for_host(&console.url, "GET", path, host);
            assert_eq!(code, 421, "Host {host:?} {path}: {body}");
        }
    }
    for host in [format!("localhost:{port}"), format!("127.0.0.1:{port}")] {
        let (code, body) = request_for_host(&console.url, "GET", "/api/status", &host);
        assert_eq!(code, 200, "Host {host}: {body}");
    }
    let (code, body) = request(&console.url, "GET", "/api/rules/nothing/parents");
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("no rule"), "{body}");
    let missing = format!("/api/trace?rule=database&namespace={}&name=nobody", ns.0);
    let (code, body) = request(&console.url, "GET", &missing);
    assert_eq!(code, 404, "{body}");
    assert!(body.contains("not found"), "{body}");

    // The operator's admin server has no console: it is off unless `ruleop console` runs.
    let operator = Operator::start(&root().join("rules"), &templates(), &ns.0);
    for path in [
        "/",
        "/api/status",
        "/api/trace?rule=database&namespace=x&name=y",
        "/trace",
    ] {
        let answer = operator.get_status(path);
        assert_eq!(answer.map(|(code, _)| code), Some(404), "{path}");
    }
}
