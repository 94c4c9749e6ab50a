//! Running it: health and readiness, metrics and traces, hardening of the process.

mod hardening;
mod health;
mod observability;
mod otlp;
