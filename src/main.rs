//! The `ruleop` binary: parse arguments, dispatch to a command, map failures to exit codes.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use ruleop::cli::{Cli, Command};
use ruleop::offline;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { sources } => offline::check(&sources),
        Command::Render {
            sources,
            file,
            observed,
            output,
            now,
        } => {
            let now = now.unwrap_or_else(ruleop::clock::now_rfc3339);
            offline::render(&sources, &file, observed.as_deref(), output, &now)
        }
        Command::Schema => Ok(offline::schema()),
    };
    match result {
        Ok(text) => {
            print!("{text}");
            if !text.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}
