//! The `ruleop` binary: parse arguments, dispatch to a command, map failures to exit codes.
#![forbid(unsafe_code)]

use std::process::ExitCode;

use clap::Parser;
use ruleop::cli::{Cli, Command, LogFormat};
use ruleop::offline;
use ruleop::rules::duration;
use ruleop::run::{RunSettings, run};

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
        Command::Run {
            sources,
            namespace,
            default_resync,
            admin_addr,
            log_format,
        } => {
            init_logging(log_format);
            let default_resync = match duration::parse(&default_resync) {
                Ok(d) => d,
                Err(e) => {
                    eprintln!("error: --default-resync: {e}");
                    return ExitCode::from(2);
                }
            };
            let settings = RunSettings {
                sources,
                namespace,
                default_resync,
                admin_addr,
            };
            return match tokio::runtime::Runtime::new().map(|rt| rt.block_on(run(settings))) {
                Ok(Ok(())) => ExitCode::SUCCESS,
                Ok(Err(e)) => {
                    eprintln!("error: {e:#}");
                    ExitCode::FAILURE
                }
                Err(e) => {
                    eprintln!("error: cannot start the async runtime: {e}");
                    ExitCode::FAILURE
                }
            };
        }
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

fn init_logging(format: LogFormat) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.init(),
        LogFormat::Json => builder.json().init(),
    }
}
