//! The integration tests: one binary, one `support`, area by area. Tests against a control
//! plane start it on first use (or reuse the one of `KUBECONFIG`, as `make test` does); each test
//! gets its own namespace and, when it needs one, its own `ruleop run` process.
//!
//! `cargo test --test it offline::` runs the tests that need no cluster; `make test` runs every
//! area with two threads, then `exclusive::` alone (docs/development/testing.md).

mod deploy;
mod engine;
mod exclusive;
mod node;
mod offline;
mod ops;
mod support;
