//! High availability: leader election on a Lease, and sharding parents across replicas.

pub(crate) mod leader;
pub(crate) mod lease_runtime;
pub(crate) mod shard;

pub use shard::shard_of;
