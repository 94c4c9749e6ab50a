//! `ruleop run`: its flags ([`Args`], leader election in [`ElectionArgs`]) turned into
//! [`RunSettings`], logs and traces started, the operator run on a runtime, and its end mapped
//! to an exit code.

use std::process::ExitCode;
use std::time::Duration;

use clap::ValueEnum;
use clap::builder::{PossibleValuesParser, TypedValueParser as _};

use crate::cache::watch::InitialList;
use crate::cmd::flags::SourceFlags;
use crate::engine::duration;
use crate::ha::leader::{DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD, MAX_SHARDS, Timing};

use crate::ha::leader::Election;
use crate::records::status::STATUS_CONFIGMAP;
use crate::runtime::run::RunSettings;

/// Which metric to watch for what (`ruleop run --help`); docs/operations/health-metrics.md has the full table.
const RUN_METRICS_HELP: &str = "\
Metrics to watch (at --admin-addr /metrics; `controller` and `rule` are the rule's name):
  controller_runtime_reconcile_total{controller,result}  reconcile rate (success, error, requeue)
  controller_runtime_reconcile_errors_total{controller}  sustained failures
  ruleop_reconcile_errors_total{rule,reason}             why reconciles fail
  controller_runtime_reconcile_time_seconds{controller}  p50/p99 reconcile latency (histogram)
  controller_runtime_active_workers{controller}          reconciles in flight (backlog at maxConcurrentReconciles;
                                                         a rule reload may run up to 4x as many, see docs/reference/rule.md)
  workqueue_depth{controller,name}                       parents waiting for a worker, served in turn (a growing backlog)
  ruleop_cached_objects{rule,kind}                       objects held in memory per watched kind
  ruleop_last_successful_reconcile_timestamp_seconds     a rule that stopped converging
  ruleop_rule_reloads_total{result}                      rejected rule edits (invalid, retrying)
  ruleop_api_writes_total{verb,kind}                     write load; non-zero at rest means a fight
  ruleop_actions_total{rule,action,result}               action runs and failures
  ruleop_shards_held, ruleop_shard_leader{shard}         with --shards: the sum of shards_held should be N
Alerts and a Grafana dashboard: deploy/observability (kustomize) or the chart's observability.enabled.";

/// Run the operator: one controller per rule, reconciling every watched parent. Uses the
/// kubeconfig (KUBECONFIG or ~/.kube/config) or the in-cluster service account.
#[derive(Debug, clap::Args)]
#[command(after_long_help = RUN_METRICS_HELP)]
pub(crate) struct Args {
    #[command(flatten)]
    sources: SourceFlags,
    /// Only watch objects in this namespace (default: all namespaces).
    #[arg(long, env = "RULEOP_NAMESPACE")]
    namespace: Option<String>,
    /// Resync period for rules that set no `resync` (e.g. 30s, 10m, 1h).
    #[arg(long, env = "RULEOP_DEFAULT_RESYNC", default_value = "10m", value_parser = resync_flag)]
    default_resync: Duration,
    /// Listen address of /metrics, /healthz and /readyz.
    #[arg(long, env = "RULEOP_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    admin_addr: std::net::SocketAddr,
    /// Log format.
    #[arg(long, value_enum, env = "RULEOP_LOG_FORMAT", default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// Export spans (one trace per reconcile) as OpenTelemetry traces over OTLP/HTTP to
    /// this collector, e.g. http://127.0.0.1:4318 (needs a build with the `otlp` feature;
    /// off by default).
    #[arg(long, env = "RULEOP_OTLP_ENDPOINT")]
    otlp_endpoint: Option<String>,
    /// Quiet time after a change in the rule or template directories before reloading.
    #[arg(long, env = "RULEOP_RELOAD_DEBOUNCE", default_value = "500ms", value_parser = duration_flag)]
    reload_debounce: Duration,
    /// Re-read the directories this often even without file events (fallback).
    #[arg(long, env = "RULEOP_RELOAD_INTERVAL", default_value = "60s", value_parser = duration_flag)]
    reload_interval: Duration,
    /// How long a stop (SIGTERM or SIGINT) may take: in-flight reconciles get most of it, the
    /// leases are released in the rest, and then the process exits whatever is still running.
    /// A second SIGTERM or SIGINT exits at once.
    #[arg(long, env = "RULEOP_SHUTDOWN_TIMEOUT", default_value = "10s", value_parser = duration_flag)]
    shutdown_timeout: Duration,
    /// Namespace of the `ruleop-status` ConfigMap that reports the rules in force and the
    /// errors of a rejected edit (default: POD_NAMESPACE, else --namespace, else default).
    #[arg(long, env = "RULEOP_STATUS_NAMESPACE")]
    status_namespace: Option<String>,
    /// How each watch lists its kind first: `streaming` (one watch sends every object, then a
    /// bookmark; Kubernetes 1.32+), `paged` (LIST pages of 500, then a watch: any server), or
    /// `auto` (streaming when a probe shows the server offers it, else paged).
    #[arg(long, env = "RULEOP_INITIAL_LIST", default_value = "auto",
          value_parser = PossibleValuesParser::new(InitialList::NAMES).try_map(|name| name.parse::<InitialList>()))]
    initial_list: InitialList,
    /// An address range `http` actions never reach through a host name, e.g. the pod and
    /// Service CIDRs (repeat the flag, or separate with commas). Loopback, link-local,
    /// metadata and the API server's own addresses are always refused; only an
    /// `allowedHosts` entry naming the address itself reaches one.
    #[arg(long = "egress-deny-cidr", env = "RULEOP_EGRESS_DENY_CIDR", value_delimiter = ',', value_parser = crate::engine::egress::parse_cidr)]
    egress_deny_cidr: Vec<ipnet::IpNet>,
    /// Watched objects (parents, children, looked-up objects) whose JSON is longer than this
    /// are neither cached nor reconciled: counted, logged, a Warning Event on the object, and
    /// a parent gets `Ready=False` (`ObjectTooLarge`). Bytes, or a number with Ki or Mi.
    #[arg(long, env = "RULEOP_MAX_OBJECT_SIZE", default_value = "256Ki", value_parser = crate::cache::watch::parse_size)]
    max_object_size: usize,
    /// How many revisions of each rule are kept, with their files, in ConfigMaps
    /// `ruleop-rev-<rule>-<n>` of the status namespace (at least 1).
    #[arg(long, env = "RULEOP_KEEP_REVISIONS", default_value_t = crate::records::revisions::DEFAULT_KEEP, value_parser = clap::value_parser!(u16).range(1..=1000).map(usize::from))]
    keep_revisions: usize,
    /// Client-side limit on the operator's requests to the API server, per second on average
    /// (0, the default: none; the API server's Priority and Fairness decides, and its 429
    /// answers are retried after the Retry-After it names).
    #[arg(long, env = "RULEOP_KUBE_QPS", default_value_t = 0)]
    kube_qps: u32,
    /// Requests allowed at once above --kube-qps (ignored without it).
    #[arg(long, env = "RULEOP_KUBE_BURST", default_value_t = 100)]
    kube_burst: u32,
    /// After this many failed reconciles in a row a parent's circuit opens: `Ready=False`
    /// (`CircuitOpen`), its watch events are ignored, and it is tried again every 5 minutes
    /// until a reconcile succeeds (0: never open).
    #[arg(long, env = "RULEOP_CIRCUIT_FAILURES", default_value_t = 10)]
    circuit_failures: u32,
    #[command(flatten)]
    election: Box<ElectionArgs>,
}

/// How `run` writes logs (level filter from RUST_LOG, default `info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

/// A duration flag: `500ms`, `30s`, `10m`, `1h`.
fn duration_flag(text: &str) -> Result<Duration, String> {
    duration::parse(text)
}

/// `--default-resync`: a duration, at least [`duration::MIN_RESYNC`].
fn resync_flag(text: &str) -> Result<Duration, String> {
    duration::parse_at_least(text, duration::MIN_RESYNC)
}

/// The `ruleop run` flags of leader election.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct ElectionArgs {
    /// Run as one of several replicas: only the holder of a Lease reconciles and writes; the
    /// others wait, ready, and take over when it is released or expires.
    #[arg(long, env = "RULEOP_LEADER_ELECT")]
    leader_elect: bool,
    /// Name of the Lease (with --leader-elect).
    #[arg(long, env = "RULEOP_LEASE_NAME", default_value = "ruleop")]
    lease_name: String,
    /// Namespace of the Lease (default: POD_NAMESPACE, else --namespace, else default).
    #[arg(long, env = "RULEOP_LEASE_NAMESPACE")]
    lease_namespace: Option<String>,
    /// How long a standby waits after the last renewal it saw before taking the lease.
    #[arg(long, env = "RULEOP_LEASE_DURATION", default_value = DEFAULT_LEASE_DURATION, value_parser = duration_flag)]
    lease_duration: Duration,
    /// How long the holder keeps writing after the start of its last successful renewal
    /// (must be shorter than --lease-duration).
    #[arg(long, env = "RULEOP_RENEW_DEADLINE", default_value = DEFAULT_RENEW_DEADLINE, value_parser = duration_flag)]
    renew_deadline: Duration,
    /// Time between attempts to acquire or renew the lease.
    #[arg(long, env = "RULEOP_RETRY_PERIOD", default_value = DEFAULT_RETRY_PERIOD, value_parser = duration_flag)]
    retry_period: Duration,
    /// Split the parents into this many shards by a stable hash (FNV-1a) of their UID, each
    /// with its own Lease `<lease-name>-shard-<i>`: every replica reconciles the parents of the
    /// shards it holds, up to its fair share (shards / live replicas, rounded up). More than 1
    /// implies leases (--leader-elect is then redundant); 1 with --leader-elect is one Lease
    /// for everything, without it no Lease at all. See docs/operations/sharding.md.
    #[arg(long, env = "RULEOP_SHARDS", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=MAX_SHARDS as i64))]
    shards: u32,
}

impl ElectionArgs {
    /// The timing, checked: `retry_period < renew_deadline < lease_duration`.
    fn timing(&self) -> Result<Timing, String> {
        let timing = Timing {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
        };
        if timing.lease_duration < Duration::from_secs(1) {
            return Err("--lease-duration: at least 1s (a Lease counts whole seconds)".to_owned());
        }
        if timing.renew_deadline >= timing.lease_duration || timing.retry_period >= timing.renew_deadline {
            return Err(format!(
                "need --retry-period < --renew-deadline < --lease-duration, got {:?} < {:?} < {:?}",
                timing.retry_period, timing.renew_deadline, timing.lease_duration
            ));
        }
        if self.shards > 1 && self.lease_name.len() > 40 {
            return Err(format!(
                "--lease-name: at most 40 characters with --shards (it prefixes every shard and member Lease and labels them), got {}",
                self.lease_name.len()
            ));
        }
        Ok(timing)
    }

    /// Whether this run takes leases: `--leader-elect`, or more than one shard.
    fn uses_leases(&self) -> bool {
        self.leader_elect || self.shards > 1
    }
}

/// Runs the operator until it is stopped: exit 0 after a clean stop, 1 when it fails, 2 for
/// flags that do not fit together.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args {
        sources,
        namespace,
        default_resync,
        admin_addr,
        log_format,
        otlp_endpoint,
        reload_debounce,
        reload_interval,
        shutdown_timeout,
        status_namespace: status_namespace_flag,
        initial_list,
        egress_deny_cidr,
        max_object_size,
        keep_revisions,
        kube_qps,
        kube_burst,
        circuit_failures,
        election: election_args,
    } = args;
    // Kept to the end of `run`: dropping it flushes the spans not exported yet.
    let json_logs = log_format == LogFormat::Json;
    let _telemetry = match crate::ops::telemetry::init(json_logs, otlp_endpoint.as_deref()) {
        Ok(telemetry) => telemetry,
        Err(e) => {
            eprintln!("{e}");
            return ExitCode::from(2);
        }
    };
    let pod_namespace = std::env::var("POD_NAMESPACE").ok();
    let (status_namespace, from) = status_namespace(status_namespace_flag, pod_namespace.clone(), namespace.as_deref());
    tracing::info!("the state of the rules is reported in ConfigMap {status_namespace}/{STATUS_CONFIGMAP} ({from})");
    let election = match election(&election_args, pod_namespace, namespace.as_deref()) {
        Ok(election) => election,
        Err(e) => {
            eprintln!("error: {e}");
            return ExitCode::from(2);
        }
    };
    let crate::offline::Sources { rules, templates } = sources.into();
    let settings = RunSettings {
        rules,
        templates,
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
        keep_revisions,
        client_limit: crate::apply::backpressure::ClientLimit {
            qps: kube_qps,
            burst: kube_burst,
        },
        circuit_failures,
    };
    let finished = tokio::runtime::Runtime::new().map(|rt| {
        let result = rt.block_on(crate::runtime::run::run(settings));
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
    // Every field named, so a new flag cannot be forgotten; `timing` and `uses_leases` read the
    // ones bound to `_`.
    let ElectionArgs {
        leader_elect: _,
        lease_name,
        lease_namespace,
        lease_duration: _,
        renew_deadline: _,
        retry_period: _,
        shards,
    } = args;
    Ok(Some(Election {
        namespace: lease_namespace
            .clone()
            .or(pod_namespace)
            .or_else(|| namespace.map(str::to_owned))
            .unwrap_or_else(|| "default".to_owned()),
        name: lease_name.clone(),
        identity: crate::ha::leader::identity(),
        timing,
        shards: *shards,
    }))
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;
    use crate::cmd::{Cli, Command};

    fn run_args(flags: &[&str]) -> Args {
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

    #[test]
    fn timing_flags_must_be_ordered() {
        let args = |l: &str, r: &str, p: &str| ElectionArgs {
            leader_elect: true,
            lease_name: "ruleop".to_owned(),
            lease_namespace: None,
            lease_duration: duration_flag(l).expect("a duration"),
            renew_deadline: duration_flag(r).expect("a duration"),
            retry_period: duration_flag(p).expect("a duration"),
            shards: 1,
        };
        assert_eq!(args("15s", "10s", "2s").timing(), Ok(Timing::CLIENT_GO));
        let err = args("10s", "10s", "2s").timing().expect_err("renew must be shorter");
        assert!(
            err.contains("--retry-period < --renew-deadline < --lease-duration"),
            "{err}"
        );
        assert!(args("500ms", "400ms", "100ms").timing().is_err());
    }

    #[test]
    fn duration_flags_are_parsed_by_clap_with_the_flag_named() {
        let err = Cli::try_parse_from(["ruleop", "run", "--retry-period", "soon"]).expect_err("bad");
        assert!(err.to_string().contains("--retry-period"), "{err}");
        assert_eq!(err.exit_code(), 2);
        let err = Cli::try_parse_from(["ruleop", "run", "--default-resync", "100ms"]).expect_err("too short");
        assert!(err.to_string().contains("--default-resync"), "{err}");
        let Command::Run(args) = Cli::try_parse_from(["ruleop", "run", "--shutdown-timeout", "3s"])
            .expect("valid")
            .command
        else {
            panic!("a run")
        };
        assert_eq!(args.shutdown_timeout, Duration::from_secs(3));
        assert_eq!(args.reload_debounce, Duration::from_millis(500));
    }
}
