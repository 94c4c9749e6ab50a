//! The one handle every layer reports through: the process's metrics and its health. The admin
//! server serves it; nothing else needs to know there is a server.

use std::sync::Arc;

use crate::ops::health::Health;
use crate::ops::metrics::Metrics;

/// What the process says about itself: counters for `/metrics`, liveness and readiness for
/// `/healthz` and `/readyz`. One per process, shared by every controller, watch and writer.
#[derive(Debug, Default)]
pub(crate) struct Observability {
    /// Counters for `/metrics`.
    pub metrics: Metrics,
    /// Liveness and readiness.
    pub health: Arc<Health>,
}
