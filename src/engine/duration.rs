//! Durations as rule files and flags write them: `30s`, `10m`, `1h30m`, `500ms`.
//!
//! Parsing is jiff's "friendly" duration format (plus ISO 8601 `PT1H`), which is total: any text
//! gives a duration or an error, never a panic or a silent overflow.

use std::time::Duration;

/// The shortest resync period a rule or flag may ask for: below it every parent would requeue
/// in a hot loop.
pub(crate) const MIN_RESYNC: Duration = Duration::from_secs(1);

/// Parses a non-negative duration such as `30s`, `10m`, `1h30m` or `500ms`.
pub(crate) fn parse(text: &str) -> Result<Duration, String> {
    let trimmed = text.trim();
    if trimmed.is_empty() {
        return Err("empty duration".to_owned());
    }
    let shown = crate::engine::diagnostic::bounded(trimmed, 64);
    let signed: jiff::SignedDuration = trimmed
        .parse()
        .map_err(|e| format!("invalid duration {shown:?}: {e} (write e.g. 500ms, 30s, 10m or 1h30m)"))?;
    if signed.is_negative() {
        return Err(format!("invalid duration {shown:?}: must not be negative"));
    }
    Duration::try_from(signed).map_err(|e| format!("invalid duration {shown:?}: {e}"))
}

/// Parses a duration and refuses one shorter than `floor`.
pub(crate) fn parse_at_least(text: &str, floor: Duration) -> Result<Duration, String> {
    let duration = parse(text)?;
    if duration < floor {
        return Err(format!(
            "{} is shorter than the minimum of {}",
            crate::engine::diagnostic::bounded(text.trim(), 64),
            jiff::SignedDuration::try_from(floor).map_or_else(|_| format!("{floor:?}"), |d| format!("{d:#}"))
        ));
    }
    Ok(duration)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compound_durations_add_up() {
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
        assert_eq!(parse(" 30s "), Ok(Duration::from_secs(30)));
    }

    #[test]
    fn bad_durations_say_why() {
        assert!(parse("10").unwrap_err().contains("invalid duration \"10\""));
        assert!(parse("m").unwrap_err().contains("invalid duration"));
        assert!(parse("").unwrap_err().contains("empty"));
        assert!(parse("-5s").unwrap_err().contains("negative"));
    }

    #[test]
    fn huge_durations_are_errors_not_panics() {
        for text in [
            "18446744073709551615s1s",
            "18446744073709551615h",
            "99999999999999999999999999999s",
            "9223372036854775807s1s",
        ] {
            assert!(parse(text).is_err(), "{text} should be refused");
        }
    }

    #[test]
    fn a_floor_refuses_shorter_durations() {
        assert!(
            parse_at_least("0s", MIN_RESYNC)
                .unwrap_err()
                .contains("shorter than the minimum of 1s")
        );
        assert!(parse_at_least("999ms", MIN_RESYNC).is_err());
        assert_eq!(parse_at_least("1s", MIN_RESYNC), Ok(MIN_RESYNC));
    }

    #[test]
    fn long_garbage_is_echoed_bounded() {
        let garbage = "x".repeat(10_000);
        assert!(parse(&garbage).unwrap_err().len() < 400);
    }
}
