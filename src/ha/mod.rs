//! High availability: leader election on a Lease, and sharding parents across replicas.

pub mod leader;
pub mod shard;
