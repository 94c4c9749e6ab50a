//! The latest figures in bench/README.md: a table generated from the newest result file of each
//! kind in bench/results (a convergence run up to N = 1,000, a large run, a soak), spliced between
//! two marker lines. `ruleop-bench figures` writes it (the convergence and soak runs do so when
//! they finish), and an offline test fails when the README no longer shows the newest files.

use std::path::{Path, PathBuf};

use serde_json::Value;

/// The line before the generated block.
pub const BEGIN: &str = "<!-- figures: generated from bench/results by `ruleop-bench figures`; do not edit -->";
/// The line after it.
pub const END: &str = "<!-- end of figures -->";

/// `readme` with the block between [`BEGIN`] and [`END`] replaced by the figures of `results`.
/// `None` when the markers are missing.
pub fn spliced(readme: &str, results: &Path) -> Option<String> {
    let (head, rest) = readme.split_once(BEGIN)?;
    let (_, tail) = rest.split_once(END)?;
    Some(format!("{head}{BEGIN}\n{}{END}{tail}", block(results)))
}

/// The generated Markdown: one table row per contender of the newest convergence run up to
/// N = 1,000 and per contender and N >= 10,000 of the newest large run, then the checks of the
/// newest soak.
pub fn block(results: &Path) -> String {
    let names = file_names(results);
    let newest = |large: bool| {
        names
            .iter()
            .filter(|name| name.starts_with("convergence-") && name.ends_with(".json"))
            .filter(|name| is_large(name) == large)
            .max()
    };
    let mut out = String::from(
        "| run | N | contender | convergence | latency p50 / p99 | writes per parent | CPU s per 1,000 parents | steady RSS | bytes per cached object | reload of all N |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (name, large) in [(newest(false), false), (newest(true), true)] {
        let Some(name) = name else { continue };
        let text = std::fs::read_to_string(results.join(name)).unwrap_or_default();
        let run: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
        let date = run["date"].as_str().unwrap_or("?");
        let revision = run["versions"]["ruleop"].as_str().unwrap_or("?");
        let revision = revision.get(..7).unwrap_or(revision);
        let md = name.trim_end_matches(".json");
        for r in run["runs"].as_array().into_iter().flatten() {
            let n = r["n"].as_f64().unwrap_or(0.0);
            // A large run's smaller N are older than the newest small run's.
            if !r["error"].is_null() || (large && n < 10_000.0) {
                continue;
            }
            let per_parent = r["writes_convergence_total"].as_f64().map(|w| w / n.max(1.0));
            out.push_str(&format!(
                "| [{date}, `{revision}`](results/{md}.md) | {n} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                r["contender"].as_str().unwrap_or("?"),
                figure(r["convergence_s"].as_f64(), 1, " s"),
                latency(&r["latency_ms"]),
                figure(per_parent, 1, ""),
                figure(r["cpu_s"]["per_1000_parents"].as_f64(), 2, ""),
                figure(r["rss_kb"]["steady"].as_f64().map(|kb| kb / 1024.0), 1, " MB"),
                figure(r["bytes_per_object"].as_f64(), 0, ""),
                figure(r["reload_s"].as_f64(), 2, " s"),
            ));
        }
    }
    let soak = names
        .iter()
        .filter(|name| name.starts_with("soak-") && name.ends_with(".md"))
        .max();
    if let Some(name) = soak {
        let text = std::fs::read_to_string(results.join(name)).unwrap_or_default();
        out.push_str(&format!("\nThe newest soak, [{name}](results/{name}): "));
        let size = text.lines().find_map(|l| l.strip_prefix("Size: "));
        out.push_str(size.unwrap_or("(no size line)"));
        out.push_str("\n\n");
        let checks = text.split("## Checks").nth(1).unwrap_or("");
        for line in checks.lines().skip_while(|l| !l.starts_with('|')) {
            if !line.starts_with('|') {
                break;
            }
            out.push_str(line);
            out.push('\n');
        }
    }
    out
}

/// bench/README.md and bench/results of the project.
pub fn readme_and_results() -> (PathBuf, PathBuf) {
    (
        super::root().join("bench/README.md"),
        super::root().join("bench/results"),
    )
}

/// Whether `dir` is the project's bench/results (a run told to write elsewhere leaves the README).
pub fn is_results_dir(dir: &Path) -> bool {
    let results = readme_and_results().1;
    std::fs::canonicalize(dir).ok() == std::fs::canonicalize(results).ok()
}

fn file_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A run with an N of 10,000 or more (`convergence-<stamp>-N<list>.json`, the list `-`-separated).
fn is_large(name: &str) -> bool {
    let list = name.trim_end_matches(".json").rsplit_once("-N").map_or("", |(_, l)| l);
    list.split('-')
        .filter_map(|n| n.parse::<u64>().ok())
        .any(|n| n >= 10_000)
}

fn figure(value: Option<f64>, decimals: usize, unit: &str) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("{v:.decimals$}{unit}"))
}

fn latency(ms: &Value) -> String {
    match (ms["p50"].as_f64(), ms["p99"].as_f64()) {
        (Some(p50), Some(p99)) => format!("{:.1} / {:.1} s", p50 / 1000.0, p99 / 1000.0),
        _ => "-".to_owned(),
    }
}
