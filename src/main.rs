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
        } => offline::render(&sources, &file, observed.as_deref(), output),
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
