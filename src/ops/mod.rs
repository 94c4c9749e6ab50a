//! Operating ruleop: metrics, health, the admin HTTP server and telemetry.

pub mod admin;
pub mod health;
pub mod metrics;
pub mod observability;
pub mod telemetry;

pub use observability::Observability;
