//! The injection guard: how an interpolated value may enter a YAML template.
//!
//! A value from a custom resource must never add keys, items or documents to a rendered object.
//! Strings are written raw only when they are structurally inert in any YAML position; anything
//! else fails the render unless the template marked it `|tojson` (a quoted JSON scalar) or `|safe`.
//! An inert string that YAML 1.1 would re-read as another type is written as a placeholder
//! ([`super::placeholder`]), so a parent's `"0755"` stays the string `"0755"`.
//!
//! The guard holds whatever the template's file name: the object environment never auto-escapes
//! (minijinja would pick HTML or JSON escaping from the extension), and [`escape`] replaces the
//! built-in `e`/`escape`, whose output is marked safe and would be written raw.

use minijinja::value::{Value, ValueKind};
use minijinja::{Error, ErrorKind, Output, State};

use super::placeholder::Placeholders;

/// Characters that start a YAML indicator when they open a plain scalar.
const LEADING_INDICATORS: &[char] = &['[', ']', '{', '}', ',', '#', '&', '*', '!', '|', '>', '%', '@', '`'];
/// Characters that may end or restructure a scalar anywhere in it (flow context, quoting, escapes).
const FORBIDDEN_ANYWHERE: &[char] = &['"', '\'', '\\', '{', '}', '[', ']', ','];

/// Why a string cannot be written raw, or `None` when it is inert.
pub(crate) fn why_not_inert(s: &str) -> Option<&'static str> {
    let breaks_or_controls = |c: &char| c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{feff}');
    if let Some(c) = s.chars().find(breaks_or_controls) {
        return Some(match c {
            '\n' | '\r' | '\u{85}' | '\u{2028}' | '\u{2029}' => "a line break",
            _ => "a control character",
        });
    }
    if s.contains(FORBIDDEN_ANYWHERE) {
        return Some("a quote, backslash or flow character ({}[],)");
    }
    if s.contains(": ") || s.ends_with(':') {
        return Some("': ' or a trailing ':' (a mapping key)");
    }
    if s.contains(" #") {
        return Some("' #' (a comment)");
    }
    if s.starts_with(LEADING_INDICATORS) {
        return Some("a leading YAML indicator");
    }
    if matches!(s, "-" | "?" | ":")
        || s.starts_with("- ")
        || s.starts_with("? ")
        || s.starts_with("---")
        || s.starts_with("...")
    {
        return Some("a leading sequence, key or document marker");
    }
    if s != s.trim() {
        return Some("leading or trailing whitespace");
    }
    None
}

/// The renderer's formatter: inert strings raw, scalars as JSON, maps and lists as JSON flow
/// collections whose strings cannot close a surrounding YAML quote; everything else is an error.
pub(crate) fn format_value(out: &mut Output, state: &mut State, value: &Value) -> Result<(), Error> {
    if value.is_safe() {
        return write(out, value.as_str().unwrap_or_default());
    }
    match value.kind() {
        ValueKind::None => write(out, "null"),
        ValueKind::Bool => write(out, if value.is_true() { "true" } else { "false" }),
        ValueKind::Number => write(out, &value.to_string()),
        ValueKind::String => {
            let raw = value.as_str().unwrap_or_default();
            // A captured block or macro output may hold placeholders: judge the real text.
            let s = match state.get_extension::<Placeholders>() {
                Some(placeholders) => placeholders.resolve(raw).map_err(invalid)?,
                None => std::borrow::Cow::Borrowed(raw),
            };
            match why_not_inert(&s) {
                None if super::placeholder::retypes(&s) => {
                    let token = state
                        .get_or_insert_extension_with(Placeholders::new)
                        .insert(s.into_owned())
                        .map_err(invalid)?;
                    write(out, &token)
                }
                None => write(out, &s),
                Some(reason) => Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "value {} is not safe to insert raw into YAML: it contains {reason}; \
                         write `{{{{ ... | tojson }}}}` to insert it as a quoted string",
                        preview(&s)
                    ),
                )),
            }
        }
        ValueKind::Seq | ValueKind::Map => {
            let json = serde_json::to_string(value)
                .map_err(|e| Error::new(ErrorKind::InvalidOperation, format!("cannot write value as JSON: {e}")))?;
            write(out, &escape_yaml_significant(&json))
        }
        ValueKind::Undefined => Err(Error::new(ErrorKind::UndefinedError, "undefined value")),
        other => Err(Error::new(
            ErrorKind::InvalidOperation,
            format!("a {other} cannot be written into a YAML template"),
        )),
    }
}

/// `e` / `escape` in object templates: the value unchanged and not marked safe, so the guard
/// judges it like any other (minijinja's own filter escapes for HTML and marks the result safe,
/// which the formatter would write raw, line breaks included). A safe value stays safe.
pub(crate) fn escape(value: Value) -> Value {
    value
}

fn invalid(e: impl std::fmt::Display) -> Error {
    Error::new(ErrorKind::InvalidOperation, e.to_string())
}

fn write(out: &mut Output, s: &str) -> Result<(), Error> {
    out.write_str(s).map_err(Error::from)
}

/// A short, escaped rendering of a value for error messages.
fn preview(s: &str) -> String {
    const MAX: usize = 60;
    let mut shown: String = s.chars().take(MAX).collect();
    if s.chars().count() > MAX {
        shown.push('…');
    }
    format!("{shown:?}")
}

/// Inside JSON strings, escape every character that is significant to YAML as `\u00XX`, so the
/// text stays one node whether it lands in a plain, single-quoted or flow position.
fn escape_yaml_significant(json: &str) -> String {
    let mut escaped = String::with_capacity(json.len());
    let mut in_string = false;
    let mut after_backslash = false;
    for c in json.chars() {
        if in_string && !after_backslash && "'#&*!|>%@`{}[],:".contains(c) {
            escaped.push_str(&format!("\\u{:04x}", c as u32));
            continue;
        }
        match c {
            '"' if !after_backslash => in_string = !in_string,
            '\\' if in_string => {
                after_backslash = !after_backslash;
                escaped.push(c);
                continue;
            }
            _ => {}
        }
        after_backslash = false;
        escaped.push(c);
    }
    escaped
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ordinary_values_are_inert() {
        for s in [
            "postgres",
            "16",
            "16.2-alpine",
            "my-db-svc.ns.svc:5432",
            "a b c",
            "10Gi",
            "http://x/y",
            "",
            "-5",
        ] {
            assert_eq!(why_not_inert(s), None, "{s:?}");
        }
    }

    #[test]
    fn structural_payloads_are_refused() {
        for s in [
            "16\nkind: ClusterRoleBinding",
            "a: b",
            "x #comment",
            "\"quoted\"",
            "it's",
            "{a: 1}",
            "[1]",
            "a,b",
            "- item",
            "---",
            "*alias",
            "&anchor",
            "!!binary",
            "| block",
            "trailing:",
            " padded",
            "back\\slash",
            "tab\tinside",
            "line\u{2028}separator",
            "next\u{85}line",
        ] {
            assert!(why_not_inert(s).is_some(), "{s:?} should be refused");
        }
    }

    #[test]
    fn json_strings_lose_their_yaml_significant_characters() {
        let json = r#"{"k":"', evil: 'x # y","q":"a\"b\\"}"#;
        assert_eq!(
            escape_yaml_significant(json),
            r#"{"k":"\u0027\u002c evil\u003a \u0027x \u0023 y","q":"a\"b\\"}"#
        );
    }
}
