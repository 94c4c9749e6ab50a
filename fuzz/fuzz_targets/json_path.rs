//! cargo-fuzz target: `ruleop::fuzzing::json_path` (the body is shared with tests/fuzz_regressions.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruleop::fuzzing::json_path(data));
