//! `ruleop-bench <measurement>`: ruleop's measurements against a real control plane, apart from
//! the tests (which assert; these report figures). `make bench`, `make soak` and `make measure-*`
//! build and run it through bench/tool.sh in the release profile; bench/README.md says what each
//! one measures. It starts control planes and operators through the test-kit (tests/kit) the
//! integration tests use, so both drive ruleop the same way.

mod console;
mod convergence;
mod memory;
mod soak;
mod unsharded;
mod writes;

use std::process::ExitCode;

/// Each measurement: its name on the command line, its `make` target and what it reports.
const MEASUREMENTS: [(&str, &str, &str); 7] = [
    (
        "convergence",
        "make bench",
        "ruleop, a floor, kopf and kro converging BENCH_N parents; writes bench/results/convergence-*",
    ),
    (
        "soak",
        "make soak",
        "SOAK_MINUTES of faults over SOAK_PARENTS Databases, 3 sharded replicas; writes bench/results/soak-*",
    ),
    (
        "memory",
        "make measure-memory",
        "the operator's RSS over MEMORY_N converged Databases, and after a restart",
    ),
    (
        "writes",
        "make measure-writes",
        "the API server's writes for WRITES_N Databases converging, then a template edit",
    ),
    (
        "unsharded",
        "make measure-unsharded",
        "one replica, no shards, over 300 parents: time, writes, CPU, RSS",
    ),
    (
        "console",
        "make measure-console",
        "the web console's page times at CONSOLE_N parents",
    ),
    (
        "figures",
        "",
        "bench/README.md's table of the latest figures, from the newest files in bench/results",
    ),
];

fn main() -> ExitCode {
    let what = std::env::args().nth(1).unwrap_or_default();
    match what.as_str() {
        "convergence" => convergence::main(),
        "soak" => finished(soak::main),
        "memory" => finished(memory::main),
        "writes" => finished(writes::main),
        "unsharded" => finished(unsharded::main),
        "console" => finished(console::main),
        "figures" => match write_figures() {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("ruleop-bench figures: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("usage: ruleop-bench <measurement> (settings from the environment; bench/README.md)\n");
            for (name, target, does) in MEASUREMENTS {
                eprintln!("  {name:<12} {target:<23} {does}");
            }
            if what.is_empty() || what == "--help" || what == "-h" {
                ExitCode::SUCCESS
            } else {
                eprintln!("\nruleop-bench: no measurement {what:?}");
                ExitCode::from(2)
            }
        }
    }
}

/// A measurement that panics when it fails (the test-kit's helpers do) and reports as it goes.
fn finished(measurement: fn()) -> ExitCode {
    measurement();
    ExitCode::SUCCESS
}

/// Rewrites the table of the latest figures in bench/README.md from bench/results
/// (`ruleop_testkit::figures`); the convergence and soak runs call it when they wrote there.
pub(crate) fn write_figures() -> Result<(), String> {
    let (readme, results) = ruleop_testkit::figures::readme_and_results();
    let text = std::fs::read_to_string(&readme).map_err(|e| format!("{}: {e}", readme.display()))?;
    let fresh = ruleop_testkit::figures::spliced(&text, &results)
        .ok_or_else(|| format!("{}: no figures markers", readme.display()))?;
    if fresh != text {
        std::fs::write(&readme, fresh).map_err(|e| format!("{}: {e}", readme.display()))?;
        eprintln!("wrote the latest figures into {}", readme.display());
    }
    Ok(())
}
