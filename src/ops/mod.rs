//! Operating ruleop: metrics, health, the admin HTTP server and telemetry.

pub(crate) mod admin;
pub(crate) mod health;
pub(crate) mod http;
pub(crate) mod metrics;
pub(crate) mod observability;
pub(crate) mod telemetry;
pub(crate) mod watch_error;

pub(crate) use observability::Observability;
