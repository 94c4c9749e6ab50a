//! Text a tenant wrote (names, reasons, messages, lease holders) made safe to print: control
//! characters escaped, so `trace`, `status` and the console never pass a terminal escape on.

/// `text` with every control character but newline and tab written as `\u{…}`, so a name or
/// message cannot move the cursor, recolour or clear a terminal.
pub(crate) fn clean(text: &str) -> String {
    if !text.chars().any(|c| c.is_control() && c != '\n' && c != '\t') {
        return text.to_owned();
    }
    text.chars()
        .map(|c| {
            if c.is_control() && c != '\n' && c != '\t' {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_sequences_and_bells_are_written_out_and_newlines_and_tabs_kept() {
        assert_eq!(clean("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(clean("\u{1b}]0;owned\u{7}\u{1b}[2J"), "\\u{1b}]0;owned\\u{7}\\u{1b}[2J");
    }
}
