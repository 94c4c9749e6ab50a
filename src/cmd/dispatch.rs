//! The `ruleop` binary's body: parse arguments, dispatch to a command, map failures to exit codes.

use std::process::ExitCode;

use crate::cmd::cli::{Cli, Command};
use crate::cmd::offline;
use crate::cmd::{diff, reference, ruletest, trace};
use crate::engine::duration;
use crate::runtime::run::{RunSettings, run};
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
        } => {
            let now = now.unwrap_or_else(crate::runtime::clock::now_rfc3339);
            offline::render(&sources, &schemas, &file, observed.as_deref(), output, &now)
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
        } => return ExitCode::from(diff::command(sources, namespace, selector, now)),
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
        Command::Rbac { sources, schemas } => offline::rbac(&sources, &schemas),
        Command::Run {
            sources,
            namespace,
            default_resync,
            admin_addr,
            log_format,
            otlp_endpoint,
            reload_debounce,
            reload_interval,
            shutdown_timeout,
            status_namespace,
            initial_list,
            egress_deny_cidr,
            max_object_size,
            election,
        } => {
            // Kept to the end of `run`: dropping it flushes the spans not exported yet.
            let json_logs = log_format == crate::cmd::cli::LogFormat::Json;
            let _telemetry = match crate::ops::telemetry::init(json_logs, otlp_endpoint.as_deref()) {
                Ok(telemetry) => telemetry,
                Err(e) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            let parse = |flag: &str, text: &str| duration::parse(text).map_err(|e| format!("error: --{flag}: {e}"));
            let durations = (
                duration::parse_at_least(&default_resync, duration::MIN_RESYNC)
                    .map_err(|e| format!("error: --default-resync: {e}")),
                parse("reload-debounce", &reload_debounce),
                parse("reload-interval", &reload_interval),
                parse("shutdown-timeout", &shutdown_timeout),
            );
            let (default_resync, reload_debounce, reload_interval, shutdown_timeout) = match durations {
                (Ok(a), Ok(b), Ok(c), Ok(d)) => (a, b, c, d),
                (Err(e), _, _, _) | (_, Err(e), _, _) | (_, _, Err(e), _) | (_, _, _, Err(e)) => {
                    eprintln!("{e}");
                    return ExitCode::from(2);
                }
            };
            let (status_namespace, from) = match (status_namespace, std::env::var("POD_NAMESPACE").ok(), &namespace) {
                (Some(ns), _, _) => (ns, "--status-namespace"),
                (None, Some(ns), _) => (ns, "POD_NAMESPACE"),
                (None, None, Some(ns)) => (ns.clone(), "--namespace; no --status-namespace or POD_NAMESPACE given"),
                (None, None, None) => (
                    "default".to_owned(),
                    "no --status-namespace, POD_NAMESPACE or --namespace given",
                ),
            };
            tracing::info!(
                "the state of the rules is reported in ConfigMap {status_namespace}/{} ({from})",
                crate::runtime::run::STATUS_CONFIGMAP
            );
            let election = match election.timing() {
                Ok(timing) if election.uses_leases() => Some(crate::ha::leader::Election {
                    namespace: election
                        .lease_namespace
                        .clone()
                        .or_else(|| std::env::var("POD_NAMESPACE").ok())
                        .or_else(|| namespace.clone())
                        .unwrap_or_else(|| "default".to_owned()),
                    name: election.lease_name.clone(),
                    identity: crate::ha::leader::identity(),
                    timing,
                    shards: election.shards,
                }),
                Ok(_) => None,
                Err(e) => {
                    eprintln!("error: {e}");
                    return ExitCode::from(2);
                }
            };
            let settings = RunSettings {
                rules: sources.rules,
                templates: sources.templates,
                namespace,
                default_resync,
                admin_addr,
                reload_debounce,
                reload_interval,
                shutdown_timeout,
                status_namespace,
                initial_list,
                election,
                egress_deny: egress_deny_cidr,
                max_object_bytes: max_object_size,
            };
            let finished = tokio::runtime::Runtime::new().map(|rt| {
                let result = rt.block_on(run(settings));
                // Dropping a runtime waits for its blocking tasks without a bound.
                rt.shutdown_timeout(std::time::Duration::from_secs(1));
                result
            });
            return match finished {
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
