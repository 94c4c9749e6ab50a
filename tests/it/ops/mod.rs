//! Running it: health and readiness, metrics and traces, hardening of the process, the console.

mod backpressure;
mod console;
mod hardening;
mod health;
mod observability;
mod otlp;
