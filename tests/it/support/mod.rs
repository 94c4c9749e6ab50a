//! The integration tests' support: the test-kit (tests/kit, `ruleop-testkit`), which the
//! measurement tool (bench/harness) shares. Tests name it `support::...` as before.

pub(crate) use ruleop_testkit::*;
