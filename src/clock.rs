//! The wall clock, read only at the edges (commands and the apply layer) and passed into plans.

/// Now as Kubernetes writes times: RFC 3339, UTC, whole seconds.
pub fn now_rfc3339() -> String {
    jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
