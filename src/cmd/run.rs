//! `ruleop run`: its flags turned into [`RunSettings`], logs and traces started, the operator
//! run on a runtime, and its end mapped to an exit code.

use std::process::ExitCode;
use std::time::Duration;

use crate::cmd::cli::{ElectionArgs, LogFormat, RunArgs};
use crate::ha::leader::Election;
use crate::records::status::STATUS_CONFIGMAP;
use crate::runtime::run::{RunSettings, run};

/// Runs the operator until it is stopped: exit 0 after a clean stop, 1 when it fails, 2 for
/// flags that do not fit together.
pub(crate) fn command(args: RunArgs) -> ExitCode {
    // Kept to the end of `run`: dropping it flushes the spans not exported yet.
    let json_logs = args.log_format == LogFormat::Json;
    let _telemetry = match crate::ops::telemetry::init(json_logs, args.otlp_endpoint.as_deref()) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let pod_namespace = std::env::var("POD_NAMESPACE").ok();
    let (status_namespace, from) = status_namespace(
        args.status_namespace.clone(),
        pod_namespace.clone(),
        args.namespace.as_deref(),
    );
    tracing::info!("the state of the rules is reported in ConfigMap {status_namespace}/{STATUS_CONFIGMAP} ({from})");
    let election = match election(&args.election, pod_namespace, args.namespace.as_deref()) {
        Ok(election) => election,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let settings = RunSettings {
        rules: args.sources.rules,
        templates: args.sources.templates,
        namespace: args.namespace,
        default_resync: args.default_resync,
        admin_addr: args.admin_addr,
        reload_debounce: args.reload_debounce,
        reload_interval: args.reload_interval,
        shutdown_timeout: args.shutdown_timeout,
        status_namespace,
        initial_list: args.initial_list,
        election,
        egress_deny: args.egress_deny_cidr,
        max_object_bytes: args.max_object_size,
        keep_revisions: args.keep_revisions,
        client_limit: crate::apply::backpressure::ClientLimit {
            qps: args.kube_qps,
            burst: args.kube_burst,
        },
        circuit_failures: args.circuit_failures,
    };
    let finished = tokio::runtime::Runtime::new().map(|rt| {
        let result = rt.block_on(run(settings));
        // Dropping a runtime waits for its blocking tasks without a bound.
        rt.shutdown_timeout(Duration::from_secs(1));
        result
    });
    match finished {
        Ok(Ok(())) => ExitCode::SUCCESS,
        Ok(Err(e)) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
        Err(e) => {
            eprintln!("error: cannot start the async runtime: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Where the `ruleop-status` ConfigMap goes, and which setting said so: `--status-namespace`,
/// else the Pod's namespace, else `--namespace`, else `default`.
fn status_namespace(
    flag: Option<String>,
    pod_namespace: Option<String>,
    namespace: Option<&str>,
) -> (String, &'static str) {
    match (flag, pod_namespace, namespace) {
        (Some(ns), _, _) => (ns, "--status-namespace"),
        (None, Some(ns), _) => (ns, "POD_NAMESPACE"),
        (None, None, Some(ns)) => (
            ns.to_owned(),
            "--namespace; no --status-namespace or POD_NAMESPACE given",
        ),
        (None, None, None) => (
            "default".to_owned(),
            "no --status-namespace, POD_NAMESPACE or --namespace given",
        ),
    }
}

/// The leases to take, if any; their namespace is `--lease-namespace`, else the Pod's, else
/// `--namespace`, else `default`.
fn election(
    args: &ElectionArgs,
    pod_namespace: Option<String>,
    namespace: Option<&str>,
) -> Result<Option<Election>, String> {
    let timing = args.timing()?;
    if !args.uses_leases() {
        return Ok(None);
    }
    Ok(Some(Election {
        namespace: args
            .lease_namespace
            .clone()
            .or(pod_namespace)
            .or_else(|| namespace.map(str::to_owned))
            .unwrap_or_else(|| "default".to_owned()),
        name: args.lease_name.clone(),
        identity: crate::ha::leader::identity(),
        timing,
        shards: args.shards,
    }))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cmd::cli::{Cli, Command};

    fn run_args(flags: &[&str]) -> RunArgs {
        let argv = ["ruleop", "run"].into_iter().chain(flags.iter().copied());
        match Cli::try_parse_from(argv).expect("valid flags").command {
            Command::Run(args) => *args,
            other => panic!("not a run: {other:?}"),
        }
    }

    #[test]
    fn the_status_namespace_comes_from_the_flag_then_the_pod_then_the_watched_namespace() {
        let pod = || Some("ruleop-system".to_owned());
        assert_eq!(status_namespace(Some("ops".to_owned()), pod(), Some("apps")).0, "ops");
        assert_eq!(status_namespace(None, pod(), Some("apps")).0, "ruleop-system");
        assert_eq!(status_namespace(None, None, Some("apps")).0, "apps");
        assert_eq!(status_namespace(None, None, None).0, "default");
    }

    #[test]
    fn leases_only_with_leader_election_or_shards_and_in_the_first_namespace_named() {
        assert!(matches!(election(&run_args(&[]).election, None, None), Ok(None)));
        let leader = election(
            &run_args(&["--leader-elect"]).election,
            Some("pod-ns".to_owned()),
            Some("apps"),
        )
        .expect("valid")
        .expect("leases");
        assert_eq!((leader.namespace.as_str(), leader.shards), ("pod-ns", 1));
        let sharded = election(
            &run_args(&["--shards", "3", "--lease-namespace", "leases"]).election,
            Some("pod-ns".to_owned()),
            None,
        )
        .expect("valid")
        .expect("leases");
        assert_eq!((sharded.namespace.as_str(), sharded.shards), ("leases", 3));
        let unordered = election(
            &run_args(&["--leader-elect", "--renew-deadline", "20s"]).election,
            None,
            None,
        );
        assert!(
            unordered
                .expect_err("renew past the lease")
                .contains("--renew-deadline")
        );
    }
}
