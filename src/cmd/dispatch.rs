//! The `ruleop` binary's body: parse arguments, dispatch to a command, map failures to exit codes.

use std::process::ExitCode;

use crate::cmd::cli::{Cli, Command};
use crate::cmd::offline;
use crate::cmd::{diff, reference, ruletest, trace};
use clap::Parser;

/// Runs the command line: parses the arguments, runs the command, maps its failure to an
/// exit code. The whole of the `ruleop` binary.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Check { sources, schemas } => offline::check(&sources, &schemas),
        Command::Render {
            sources,
            schemas,
            file,
            observed,
            output,
            now,
            revision,
            status_namespace,
        } => {
            let now = now.unwrap_or_else(crate::records::clock::now_rfc3339);
            let inputs = offline::RenderInputs {
                file: &file,
                observed: observed.as_deref(),
                output,
                now: &now,
            };
            match revision {
                None => offline::render(&sources, &schemas, &inputs),
                Some(revision) => {
                    crate::cmd::rollout::render_revision(&sources, &schemas, &inputs, revision, &status_namespace)
                }
            }
        }
        Command::Schema { kind } => Ok(offline::schema(kind)),
        Command::Crd { sources } => offline::crd(&sources),
        Command::Reference { page } => Ok(match page {
            crate::cmd::cli::ReferencePage::Cli => reference::cli(),
            crate::cmd::cli::ReferencePage::Metrics => reference::metrics(),
        }),
        Command::Test {
            sources,
            schemas,
            paths,
            tests_dir,
            junit,
        } => {
            return ExitCode::from(ruletest::command(
                &sources,
                &schemas,
                &paths,
                tests_dir,
                junit.as_deref(),
            ));
        }
        Command::Diff {
            sources,
            namespace,
            selector,
            now,
            revision,
            rule,
            status_namespace,
        } => {
            let kept = revision.zip(rule).map(|(revision, rule)| diff::Kept {
                rule,
                revision,
                status_namespace,
            });
            return ExitCode::from(diff::command(sources, namespace, selector, now, kept));
        }
        Command::Trace {
            sources,
            target,
            namespace,
            watch,
            output,
        } => {
            let options = trace::Options {
                target,
                namespace,
                watch,
                output,
            };
            return ExitCode::from(trace::command(&sources, &options));
        }
        Command::Status {
            sources,
            status_namespace,
            namespace,
            output,
        } => {
            let options = crate::cmd::status::Options {
                status_namespace,
                namespace,
                json: output == crate::cmd::cli::StatusOutput::Json,
            };
            return ExitCode::from(crate::cmd::status::command(&sources, &options));
        }
        Command::Console {
            sources,
            addr,
            status_namespace,
        } => {
            let options = crate::cmd::console::Options { addr, status_namespace };
            return ExitCode::from(crate::cmd::console::command(&sources, &options));
        }
        Command::Rollout {
            show,
            rule,
            status_namespace,
            wait,
        } => {
            use crate::cmd::cli::RolloutShow;
            use crate::cmd::rollout::Show;
            use crate::engine::rollout::control::Command as Ask;
            let show = match show {
                RolloutShow::Status => Show::Status,
                RolloutShow::History => Show::History,
                RolloutShow::Pause => Show::Ask(Ask::Pause, wait),
                RolloutShow::Resume => Show::Ask(Ask::Resume, wait),
                RolloutShow::Undo => Show::Ask(Ask::Undo, wait),
            };
            return ExitCode::from(crate::cmd::rollout::command(show, rule.as_deref(), &status_namespace));
        }
        Command::Rbac { sources, schemas } => offline::rbac(&sources, &schemas),
        Command::Run(args) => return crate::cmd::run::command(*args),
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
