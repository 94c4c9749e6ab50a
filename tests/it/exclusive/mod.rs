//! Tests that need the machine, the API server's write counters or its audit log to themselves:
//! leader election, sharding, a rollout across shards, an API server outage, write counts, queue order, idempotency,
//! tenants' write counts, and `diff` and `trace` (no write by any ruleop in their window). `make test` runs them one at a
//! time after the rest (`cargo test --test it exclusive:: -- --test-threads=1`).

mod diff;
mod idempotency;
mod leader;
mod outage;
mod queue;
mod sharded_rollout;
mod sharding;
mod tenant;
mod trace;
mod writes;
