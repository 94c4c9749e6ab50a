//! Tests that need the machine, the API server's write counters or its audit log to themselves:
//! leader election, sharding, an API server outage, write counts, queue order, idempotency,
//! tenants' write counts, and `diff` and `trace` (no write by any ruleop in their window). `make test` runs them one at a
//! time after the rest (`cargo test --test it exclusive:: -- --test-threads=1`).

mod diff;
mod idempotency;
mod leader;
mod outage;
mod queue;
mod sharding;
mod tenant;
mod trace;
mod writes;
