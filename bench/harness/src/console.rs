//! The console's page times at `CONSOLE_N` parents (default 1,000) in one namespace: the rules
//! page (which counts every parent of every rule), the first and the last page of the Database
//! list, its JSON, one parent's trace, and the parents page loaded in headless chromium (browser
//! start included). Each is requested `ROUNDS` times; the median and the slowest are reported. A
//! measurement, not a test (`make measure-console`). The parents are created without an operator
//! (no status yet): the list's cost is the API server's LIST and the page, not the status.

use std::time::{Duration, Instant};

use ruleop_testkit::console::{Console, dom, request};
use ruleop_testkit::*;

const ROUNDS: usize = 7;

pub(crate) fn main() {
    let n: usize = std::env::var("CONSOLE_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    install_crds();
    let ns = Namespace::new("console-bench");
    let all: Vec<String> = (0..n).map(|i| database(&format!("db-{i:04}"), 0, "")).collect();
    for chunk in all.chunks(250) {
        apply_yaml(&ns.0, &chunk.join("\n---\n"));
    }
    let listed = kubectl_ok(&["get", "databases", "-n", &ns.0, "-o", "name"]);
    assert_eq!(listed.lines().count(), n, "{n} Databases");
    let console = Console::start();
    let pages = n.div_ceil(50);
    let paths = [
        ("rules page (counts every parent)", "/".to_owned()),
        ("parents page 1", format!("/rules/database?namespace={}", ns.0)),
        (
            "parents, last page",
            format!("/rules/database?namespace={}&page={pages}", ns.0),
        ),
        ("parents JSON, all namespaces", "/api/rules/database/parents".to_owned()),
        (
            "one parent's trace",
            format!("/trace?rule=database&namespace={}&name=db-0000", ns.0),
        ),
    ];
    println!("console at {n} parents, {ROUNDS} rounds each (median, slowest):");
    for (what, path) in &paths {
        let mut times = Vec::new();
        for _ in 0..ROUNDS {
            let start = Instant::now();
            let (code, body) = request(&console.url, "GET", path);
            times.push(start.elapsed());
            assert_eq!(code, 200, "{path}: {body}");
        }
        report(what, &mut times);
    }
    let mut times = Vec::new();
    for _ in 0..3 {
        let start = Instant::now();
        let html = dom(&format!("{}/rules/database?namespace={}", console.url, ns.0));
        times.push(start.elapsed());
        assert!(html.contains(&format!("{n} parents, page 1 of {pages}")), "{html}");
    }
    report(
        "parents page 1 in headless chromium (browser start included)",
        &mut times,
    );
}

fn report(what: &str, times: &mut [Duration]) {
    times.sort();
    println!(
        "  {what}: {:.0} ms, slowest {:.0} ms",
        times[times.len() / 2].as_secs_f64() * 1000.0,
        times[times.len() - 1].as_secs_f64() * 1000.0
    );
}
