//! The wall clock as ruleop stamps its records and statuses, read only at the edges (commands,
//! the run loop, the apply layer) and passed into plans.

/// Now as Kubernetes writes a `MicroTime`: RFC 3339, UTC, with microseconds.
///
/// Durations are computed from these stamps (an `on: delete` action's `timeout` counts from its
/// recorded `startedAt`), so whole seconds would end a 3 s timeout up to a second early.
pub(crate) fn now_rfc3339() -> String {
    format_rfc3339(jiff::Timestamp::now())
}

fn format_rfc3339(at: jiff::Timestamp) -> String {
    at.strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stamps_keep_microseconds_and_parse_back_to_the_same_instant() {
        let at = jiff::Timestamp::new(1_764_000_000, 540_123_000).expect("time");
        let text = format_rfc3339(at);
        assert_eq!(text, "2025-11-24T16:00:00.540123Z");
        assert_eq!(text.parse::<jiff::Timestamp>().expect("parses"), at);
    }

    #[test]
    fn a_stamp_on_a_whole_second_still_carries_its_fraction() {
        let at = jiff::Timestamp::from_second(1_764_000_000).expect("time");
        assert_eq!(format_rfc3339(at), "2025-11-24T16:00:00.000000Z");
    }
}
