//! Durations as rule files write them: `30s`, `10m`, `1h30m`, `500ms`.

use std::time::Duration;

/// Parses a duration made of `<number><unit>` parts, units `ms`, `s`, `m`, `h`.
pub fn parse(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    if text.is_empty() {
        return Err("empty duration".to_owned());
    }
    let mut total = Duration::ZERO;
    let mut rest = text;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return Err(format!("invalid duration {text:?}: expected a number at {rest:?}"));
        }
        let number: u64 = rest[..digits]
            .parse()
            .map_err(|e| format!("invalid duration {text:?}: {e}"))?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let part = match &rest[..unit_len] {
            "ms" => Duration::from_millis(number),
            "s" => Duration::from_secs(number),
            "m" => Duration::from_secs(number * 60),
            "h" => Duration::from_secs(number * 3600),
            unit => {
                return Err(format!(
                    "invalid duration {text:?}: unknown unit {unit:?} (use ms, s, m or h)"
                ));
            }
        };
        total += part;
        rest = &rest[unit_len..];
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn compound_durations_add_up() {
        assert_eq!(parse("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse("10m"), Ok(Duration::from_secs(600)));
    }

    #[test]
    fn bad_durations_say_why() {
        assert!(parse("10").unwrap_err().contains("unknown unit \"\""));
        assert!(parse("m").unwrap_err().contains("expected a number"));
        assert!(parse("5d").unwrap_err().contains("unknown unit \"d\""));
    }
}
