//! cargo-fuzz target: `ruleop::fuzzing::rule_loader` (the body is shared with tests/fuzz_regressions.rs).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| ruleop::fuzzing::rule_loader(data));
