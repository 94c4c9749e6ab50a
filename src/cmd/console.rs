//! `ruleop console`: the read-only web console ([`inspect::console`]).

use std::net::SocketAddr;
use std::process::ExitCode;

use crate::cmd::flags::SourceFlags;
use crate::inspect;

/// Serve a read-only web console: the rules with the last reload and the parents not Ready
/// (their messages name the template and line), a rule's parents filtered by namespace and
/// Ready and paged, and one parent's trace as a graph of its children with their states.
/// Every page has its JSON under /api/ (`ruleop status -o json`, `ruleop trace -o json`).
/// GET only; shows no Secret data. Not part of `ruleop run`: off unless this command runs.
///
/// Permissions: those of `ruleop trace` and `ruleop status`.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    sources: SourceFlags,
    /// Address to serve on (keep it on loopback, or put it behind your own authentication:
    /// the console itself authenticates no one).
    #[arg(long, env = "RULEOP_CONSOLE_ADDR", default_value = "127.0.0.1:8081")]
    addr: SocketAddr,
    /// Namespace of the `ruleop-status` ConfigMap and the Leases (ruleop's own namespace).
    #[arg(long, env = "RULEOP_STATUS_NAMESPACE", default_value = "ruleop-system")]
    status_namespace: String,
    /// A host name (or address) the console may be reached by, besides `localhost`, 127.0.0.1,
    /// [::1] and the `--addr` address: a request naming any other `Host` is refused with 421, so
    /// a page on another site cannot read the console through DNS rebinding (repeat the flag, or
    /// separate with commas).
    #[arg(long = "allowed-host", env = "RULEOP_CONSOLE_ALLOWED_HOSTS", value_delimiter = ',')]
    allowed_hosts: Vec<String>,
}

/// Serves until stopped; exit 2 when it cannot start.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args {
        sources,
        addr,
        status_namespace,
        allowed_hosts,
    } = args;
    let options = inspect::console::Options {
        addr,
        status_namespace,
        allowed_hosts,
    };
    ExitCode::from(inspect::console::command(&sources.into(), &options))
}
