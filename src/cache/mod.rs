//! What ruleop knows of the cluster: the kinds it serves (discovery) and their CRDs' schemas, and tolerant watch streams
//! feeding compressed caches of parents, children and looked-up objects.

pub(crate) mod children;
pub(crate) mod crds;
pub(crate) mod discovery;
pub(crate) mod lookups;
pub(crate) mod packed;
pub(crate) mod parents;
pub(crate) mod relist;
pub(crate) mod retry;
pub(crate) mod watch;
