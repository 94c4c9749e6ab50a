//! Errors people read: what is wrong, where (file:line:col), and what to do about it.

use std::fmt;
use std::path::{Path, PathBuf};

/// A position in a rule or template file (1-based line and column).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceLocation {
    /// The file, as given on the command line or found in the directory walk.
    pub file: PathBuf,
    /// 1-based line; 0 when only the file is known.
    pub line: u64,
    /// 1-based column; 0 when only the line is known.
    pub column: u64,
}

impl SourceLocation {
    /// A location with line and column.
    pub fn new(file: &Path, line: u64, column: u64) -> Self {
        SourceLocation {
            file: file.to_path_buf(),
            line,
            column,
        }
    }

    /// A location from a serde-saphyr span.
    pub fn from_span(file: &Path, location: &serde_saphyr::Location) -> Self {
        Self::new(file, location.line(), location.column())
    }
}

impl fmt::Display for SourceLocation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.file.display())?;
        if self.line > 0 {
            write!(f, ":{}", self.line)?;
            if self.column > 0 {
                write!(f, ":{}", self.column)?;
            }
        }
        Ok(())
    }
}

/// One problem found while loading rules and templates.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// Where the problem is.
    pub location: SourceLocation,
    /// What is wrong.
    pub message: String,
    /// What to do about it, when there is something specific to say.
    pub hint: Option<String>,
}

impl Diagnostic {
    /// A diagnostic without a hint.
    pub fn new(location: SourceLocation, message: impl Into<String>) -> Self {
        Diagnostic {
            location,
            message: message.into(),
            hint: None,
        }
    }

    /// Adds what to do about it.
    pub fn with_hint(mut self, hint: impl Into<String>) -> Self {
        self.hint = Some(hint.into());
        self
    }
}

impl fmt::Display for Diagnostic {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: error: {}", self.location, self.message)?;
        if let Some(hint) = &self.hint {
            write!(f, "\n  hint: {hint}")?;
        }
        Ok(())
    }
}

/// Every problem found in one load, in file order.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, diagnostic) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{diagnostic}")?;
        }
        Ok(())
    }
}

/// The 1-based column of a byte offset in `source`.
pub(crate) fn column_of(source: &str, byte_offset: usize) -> u64 {
    let offset = byte_offset.min(source.len());
    let line_start = source[..offset].rfind('\n').map_or(0, |i| i + 1);
    source[line_start..offset].chars().count() as u64 + 1
}

/// How many bytes of a message may reach a status condition, an Event or a log line.
pub(crate) const MESSAGE_LIMIT: usize = 2048;

/// `text` cut to at most `limit` bytes (on a character boundary), with an ellipsis and the full
/// size when something was cut: user values must never be echoed unbounded.
pub(crate) fn bounded(text: &str, limit: usize) -> std::borrow::Cow<'_, str> {
    if text.len() <= limit {
        return std::borrow::Cow::Borrowed(text);
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    std::borrow::Cow::Owned(format!("{}… ({} bytes in all)", &text[..end], text.len()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_text_is_kept_whole() {
        assert_eq!(bounded("abc", 3), "abc");
    }

    #[test]
    fn long_text_is_cut_on_a_character_boundary_with_its_size() {
        let text = "é".repeat(10);
        assert_eq!(bounded(&text, 5), "éé… (20 bytes in all)");
    }
}
