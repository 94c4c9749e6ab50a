//! Strings keep their type: a string that YAML 1.1 would read back as a number, boolean or null
//! is written as a per-render placeholder and put back after the rendered text is parsed.
//!
//! The formatter does not know where a value lands: `image: postgres:{{ spec.version }}` must give
//! `postgres:16`, `version: {{ spec.version }}` must give the string `"16"`, not the integer, and
//! `mode: {{ spec.mode }}` with `"0755"` must not become 493. So the formatter writes such a string
//! (see [`retypes`]) as an inert token, records the original in a [`Placeholders`] value that
//! lives in the render's own minijinja state, and the caller, once it has parsed the text, calls
//! [`Placeholders::restore`]: every token inside a string scalar or key is replaced by its
//! original text. A token is letters-free (private-use characters and decimal digits), so it is a
//! plain string in any YAML position, survives `upper`/`lower`, and never makes a scalar a number.
//!
//! Why a nonce: a tenant's text can reach a parsed string through `tojson` or a rendered map, and
//! YAML escapes decode to any character, so a fixed token could be forged there to copy another
//! value of the same render into a field the tenant can read. Each render draws a fresh 64-bit
//! nonce (std's randomly keyed hasher) that the output never shows; the plan stays a function of
//! its inputs because every token is replaced before anything else reads the object.
//!
//! A captured block or macro output (`{% set x %}…{% endset %}`, `{{ m() }}`) holds tokens until
//! printed; the formatter resolves them first, so the guard and this check see the real text.
//! A filter applied to such a captured string in between (`| length`, slicing) sees the token.

use std::borrow::Cow;
use std::hash::BuildHasher;

use serde_json::Value;

/// Opens a token: `OPEN nonce MID index CLOSE`.
const OPEN: char = '\u{E000}';
const MID: char = '\u{E001}';
const CLOSE: char = '\u{E002}';

/// Most bytes of original strings one render may record (on top of the output limit).
pub(crate) const MAX_RECORDED_BYTES: usize = super::MAX_OUTPUT_BYTES;

/// The strings one render wrote as tokens, by index. Empty (and nonce-less) until first used.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Placeholders {
    /// `OPEN nonce MID`, or empty when nothing was recorded.
    prefix: String,
    /// Original strings, fully resolved, by token index.
    originals: Vec<String>,
    /// Total bytes in `originals`.
    bytes: usize,
}

/// A token that cannot be put back: a filter changed it, or a restored key repeats another.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RestoreError(pub String);

impl Placeholders {
    /// A fresh, empty record with its own nonce.
    pub fn new() -> Self {
        let nonce = std::collections::hash_map::RandomState::new().hash_one(0u8);
        Placeholders {
            prefix: format!("{OPEN}{nonce}{MID}"),
            originals: Vec::new(),
            bytes: 0,
        }
    }

    /// Whether no string was recorded.
    pub fn is_empty(&self) -> bool {
        self.originals.is_empty()
    }

    /// Records `original` and returns the token to write in its place.
    pub fn insert(&mut self, original: String) -> Result<String, RestoreError> {
        if self.prefix.is_empty() {
            *self = Placeholders::new();
        }
        self.bytes = self.bytes.saturating_add(original.len());
        if self.bytes > MAX_RECORDED_BYTES {
            return Err(RestoreError(format!(
                "rendered strings total more than {MAX_RECORDED_BYTES} bytes"
            )));
        }
        let token = format!("{}{}{CLOSE}", self.prefix, self.originals.len());
        self.originals.push(original);
        Ok(token)
    }

    /// `text` with every token replaced by its original.
    pub fn resolve<'a>(&self, text: &'a str) -> Result<Cow<'a, str>, RestoreError> {
        if self.prefix.is_empty() || !text.contains(self.prefix.as_str()) {
            return Ok(Cow::Borrowed(text));
        }
        let mut out = String::with_capacity(text.len());
        let mut rest = text;
        while let Some(at) = rest.find(self.prefix.as_str()) {
            out.push_str(&rest[..at]);
            let after = &rest[at + self.prefix.len()..];
            let original = after
                .split_once(CLOSE)
                .and_then(|(index, tail)| Some((self.originals.get(index.parse::<usize>().ok()?)?, tail)));
            let Some((original, tail)) = original else {
                return Err(RestoreError(
                    "a filter altered a placeholder of a captured value; apply it before capturing".to_owned(),
                ));
            };
            out.push_str(original);
            rest = tail;
        }
        out.push_str(rest);
        Ok(Cow::Owned(out))
    }

    /// `text` with tokens replaced where possible, for error messages.
    pub fn display(&self, text: &str) -> String {
        self.resolve(text).map_or_else(|_| text.to_owned(), Cow::into_owned)
    }

    /// The parsed object with every token in its strings and keys replaced by its original.
    pub fn restore(&self, value: Value) -> Result<Value, RestoreError> {
        if self.is_empty() {
            return Ok(value);
        }
        Ok(match value {
            Value::String(s) => match self.resolve(&s)? {
                Cow::Borrowed(_) => Value::String(s),
                Cow::Owned(resolved) => Value::String(resolved),
            },
            Value::Array(items) => Value::Array(
                items
                    .into_iter()
                    .map(|item| self.restore(item))
                    .collect::<Result<_, _>>()?,
            ),
            Value::Object(map) => {
                let mut restored = serde_json::Map::with_capacity(map.len());
                for (key, item) in map {
                    let key = self.resolve(&key)?.into_owned();
                    let item = self.restore(item)?;
                    if restored.insert(key.clone(), item).is_some() {
                        return Err(RestoreError(format!("rendered key {key:?} twice in one mapping")));
                    }
                }
                Value::Object(restored)
            }
            other => other,
        })
    }
}

/// Whether YAML 1.1 (as `kubectl` and [`crate::engine::yaml`] read it) might give `s`, written as
/// a whole plain scalar, a type other than string: empty (null), `~`, the boolean and null words
/// in any case, anything starting with a digit, sign or dot (integers in every base, `1_000`,
/// sexagesimal `12:30`, floats, `.inf`, timestamps), and the merge and value keys `<<` and `=`.
/// Deliberately broad: a string caught here that would have stayed a string only costs a token.
pub(crate) fn retypes(s: &str) -> bool {
    let Some(first) = s.chars().next() else {
        return true;
    };
    if first.is_ascii_digit() || matches!(first, '+' | '-' | '.' | '~' | '<' | '=') {
        return true;
    }
    const WORDS: [&str; 14] = [
        "y", "n", "yes", "no", "true", "false", "on", "off", "null", "nan", "inf", "infinity", "none", "nil",
    ];
    s.len() <= 8 && WORDS.iter().any(|w| w.eq_ignore_ascii_case(s))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tokens_resolve_inside_longer_text_and_alone() {
        let mut p = Placeholders::new();
        let a = p.insert("16".to_owned()).expect("fits");
        let b = p.insert("yes".to_owned()).expect("fits");
        let value = json!({"image": format!("postgres:{a}"), "v": a, a.clone(): [b.clone()], "n": 16});
        assert_eq!(
            p.restore(value).expect("restores"),
            json!({"image": "postgres:16", "v": "16", "16": ["yes"], "n": 16})
        );
    }

    #[test]
    fn each_render_has_its_own_nonce() {
        let (mut a, mut b) = (Placeholders::new(), Placeholders::new());
        let token = a.insert("1".to_owned()).expect("fits");
        b.insert("2".to_owned()).expect("fits");
        assert_eq!(b.resolve(&token).expect("not ours, left alone"), token);
    }

    #[test]
    fn an_altered_token_is_an_error_not_leftover_text() {
        let mut p = Placeholders::new();
        let token = p.insert("1".to_owned()).expect("fits");
        let cut: String = token.chars().take(token.chars().count() - 1).collect();
        assert!(p.resolve(&format!("{cut}x")).is_err());
    }

    #[test]
    fn keys_that_collide_once_restored_are_refused() {
        let mut p = Placeholders::new();
        let a = p.insert("1".to_owned()).expect("fits");
        let err = p.restore(json!({a: 1, "1": 2})).expect_err("duplicate");
        assert!(err.0.contains("twice"), "{err}");
    }

    #[test]
    fn recorded_bytes_are_bounded() {
        let mut p = Placeholders::new();
        p.insert("1".repeat(MAX_RECORDED_BYTES)).expect("exactly the limit");
        assert!(p.insert("2".to_owned()).is_err());
    }

    #[test]
    fn retyping_forms_are_caught_and_words_are_not() {
        for s in [
            "",
            "0755",
            "16",
            "1e3",
            "1_000",
            "12:30",
            "0x1F",
            "0b101",
            "0o17",
            "-5",
            "+5",
            ".5",
            ".inf",
            "-.inf",
            ".NaN",
            "~",
            "null",
            "Null",
            "NULL",
            "true",
            "True",
            "FALSE",
            "yes",
            "Yes",
            "NO",
            "y",
            "N",
            "on",
            "Off",
            "2001-12-14",
            "<<",
            "=",
            "nan",
            "inf",
        ] {
            assert!(retypes(s), "{s:?}");
        }
        for s in [
            "postgres", "orders", "x1F", "e3", "yess", "nothing", "onwards", "fast", "infra",
        ] {
            assert!(!retypes(s), "{s:?}");
        }
    }
}
