//! How a command's text ends up: on stdout with a final newline, an error on stderr, and the
//! exit code.

use std::process::ExitCode;

/// How a command that computes a text ends: the text on stdout and exit 0, or the error on
/// stderr and exit 1.
pub(crate) fn printed(result: Result<String, crate::offline::CommandError>) -> ExitCode {
    match result {
        Ok(text) => {
            print(&text);
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

/// Prints `text` on stdout, ending it with a newline when it has none.
pub(crate) fn print(text: &str) {
    print!("{text}");
    if !text.ends_with('\n') {
        println!();
    }
}
