//! Replays every fuzz seed and every saved fuzz finding (`fuzz/seeds/<target>/*`,
//! `fuzz/regressions/<target>/*`) through the same function its cargo-fuzz target calls
//! (`ruleop::engine::fuzzing`), so a fixed crash stays fixed. Runs in `make test`; fuzzing itself
//! (`make fuzz`) does not.

use std::path::Path;

#[test]
fn every_saved_fuzz_input_runs_clean() {
    let fuzz = Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz");
    let mut failures = Vec::new();
    let mut replayed = 0;
    for target in ruleop::engine::fuzzing::TARGETS {
        for kind in ["seeds", "regressions"] {
            let Ok(entries) = std::fs::read_dir(fuzz.join(kind).join(target)) else {
                continue;
            };
            let mut files: Vec<_> = entries.flatten().map(|e| e.path()).collect();
            files.sort();
            for file in files.iter().filter(|f| !f.ends_with("README.md")) {
                let data = std::fs::read(file).expect("read a fuzz input");
                replayed += 1;
                let outcome = std::panic::catch_unwind(|| ruleop::engine::fuzzing::run(target, &data));
                if !matches!(outcome, Ok(true)) {
                    failures.push(file.display().to_string());
                }
            }
        }
    }
    assert!(replayed > 0, "no fuzz inputs found under {}", fuzz.display());
    assert!(failures.is_empty(), "fuzz inputs that fail again: {failures:#?}");
}
