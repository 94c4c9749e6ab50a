//! cargo-fuzz target: `ruleop::engine::fuzzing::duration` (the body is shared with tests/it/offline/fuzz_regressions.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruleop::engine::fuzzing::duration(data));
