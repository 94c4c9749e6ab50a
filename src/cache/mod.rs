//! What ruleop knows of the cluster: the kinds it serves (discovery) and their CRDs' schemas, and tolerant watch streams
//! feeding compressed caches of parents, children and looked-up objects.

pub mod children;
pub mod crds;
pub mod discovery;
pub mod lookups;
pub mod packed;
pub mod parents;
pub mod watch;
