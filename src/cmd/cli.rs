//! Command line: `ruleop check | render | schema` (and `run` once the live engine lands).
//! Every flag can also be set through the environment variable named in `--help`.

use std::path::PathBuf;

use clap::{Parser, Subcommand, ValueEnum};

/// A Kubernetes operator that is a declarative rules engine: each rule maps a watched custom
/// resource to templated children, guarded one-shot actions and status.
#[derive(Debug, Parser)]
#[command(name = "ruleop", version, about, long_about = None)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Where the rules and templates live.
#[derive(Debug, Clone, clap::Args)]
pub struct Sources {
    /// Directory of rule files (*.yaml, *.yml; read recursively, dot entries skipped).
    #[arg(long, env = "RULEOP_RULES", default_value = "rules")]
    pub rules: PathBuf,
    /// Directory of templates; a rule names a template by its path relative to this directory.
    #[arg(long, env = "RULEOP_TEMPLATES", default_value = "templates")]
    pub templates: PathBuf,
}

/// The subcommands.
/// Which metric to watch for what (`ruleop run --help`); the README has the full table.
const RUN_METRICS_HELP: &str = "\
Metrics to watch (at --admin-addr /metrics; `controller` and `rule` are the rule's name):
  controller_runtime_reconcile_total{controller,result}  reconcile rate (success, error, requeue)
  controller_runtime_reconcile_errors_total{controller}  sustained failures
  ruleop_reconcile_errors_total{rule,reason}             why reconciles fail
  controller_runtime_reconcile_time_seconds{controller}  p50/p99 reconcile latency (histogram)
  controller_runtime_active_workers{controller}          reconciles in flight (backlog at maxConcurrentReconciles;
                                                         a rule reload may run up to 4x as many, see the README)
  workqueue_depth{controller,name}                       parents waiting for a worker, served in turn (a growing backlog)
  ruleop_cached_objects{rule,kind}                       objects held in memory per watched kind
  ruleop_last_successful_reconcile_timestamp_seconds     a rule that stopped converging
  ruleop_rule_reloads_total{result}                      rejected rule edits (invalid, retrying)
  ruleop_api_writes_total{verb,kind}                     write load; non-zero at rest means a fight
  ruleop_actions_total{rule,action,result}               action runs and failures
  ruleop_shards_held, ruleop_shard_leader{shard}         with --shards: the sum of shards_held should be N
Alerts and a Grafana dashboard: deploy/observability (a kustomize component).";

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: one controller per rule, reconciling every watched parent. Uses the
    /// kubeconfig (KUBECONFIG or ~/.kube/config) or the in-cluster service account.
    #[command(after_long_help = RUN_METRICS_HELP)]
    Run {
        #[command(flatten)]
        sources: Sources,
        /// Only watch objects in this namespace (default: all namespaces).
        #[arg(long, env = "RULEOP_NAMESPACE")]
        namespace: Option<String>,
        /// Resync period for rules that set no `resync` (e.g. 30s, 10m, 1h).
        #[arg(long, env = "RULEOP_DEFAULT_RESYNC", default_value = "10m")]
        default_resync: String,
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
        #[arg(long, env = "RULEOP_RELOAD_DEBOUNCE", default_value = "500ms")]
        reload_debounce: String,
        /// Re-read the directories this often even without file events (fallback).
        #[arg(long, env = "RULEOP_RELOAD_INTERVAL", default_value = "60s")]
        reload_interval: String,
        /// Namespace of the `ruleop-status` ConfigMap that reports the rules in force and the
        /// errors of a rejected edit (default: POD_NAMESPACE, else --namespace, else default).
        #[arg(long, env = "RULEOP_STATUS_NAMESPACE")]
        status_namespace: Option<String>,
        /// How each watch lists its kind first: `streaming` (one watch sends every object, then a
        /// bookmark; Kubernetes 1.32+), `paged` (LIST pages of 500, then a watch: any server), or
        /// `auto` (streaming when a probe shows the server offers it, else paged).
        #[arg(long, value_enum, env = "RULEOP_INITIAL_LIST", default_value_t = crate::cache::watch::InitialList::Auto)]
        initial_list: crate::cache::watch::InitialList,
        /// An address range `http` actions never reach through a host name, e.g. the pod and
        /// Service CIDRs (repeat the flag, or separate with commas). Loopback, link-local,
        /// metadata and the API server's own addresses are always refused; only an
        /// `allowedHosts` entry naming the address itself reaches one.
        #[arg(long = "egress-deny-cidr", env = "RULEOP_EGRESS_DENY_CIDR", value_delimiter = ',', value_parser = crate::engine::egress::parse_cidr)]
        egress_deny_cidr: Vec<ipnet::IpNet>,
        #[command(flatten)]
        election: Box<crate::ha::leader::ElectionArgs>,
    },
    /// Validate every rule and template; print each problem as file:line:col and exit 1 if any.
    Check {
        #[command(flatten)]
        sources: Sources,
    },
    /// Plan one custom resource offline: print its children as multi-document YAML, then the
    /// prune list, action decisions (with reasons) and the status patch as comments.
    Render {
        #[command(flatten)]
        sources: Sources,
        /// The parent object (YAML). A missing uid, namespace or generation gets a placeholder.
        #[arg(short = 'f', long = "file", env = "RULEOP_RENDER_FILE")]
        file: PathBuf,
        /// Directory of YAML files with live children to plan against (their status feeds
        /// status fields and conditions). Objects without ruleop labels are matched to child
        /// ids by kind.
        #[arg(long, env = "RULEOP_OBSERVED")]
        observed: Option<PathBuf>,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t = OutputFormat::Yaml, env = "RULEOP_OUTPUT")]
        output: OutputFormat,
        /// The time stamped on changed conditions (RFC 3339; default: now).
        #[arg(long, env = "RULEOP_NOW")]
        now: Option<String>,
    },
    /// Print the minimal ClusterRole the rules need (committed as deploy/rbac/clusterrole.yaml).
    Rbac {
        #[command(flatten)]
        sources: Sources,
        /// Directory of CRD manifests, for the plurals of custom kinds.
        #[arg(long, env = "RULEOP_CRDS", default_value = "deploy/crds")]
        crds: std::path::PathBuf,
    },
    /// Print the JSON Schema of rule files (for editors; committed as schema/rule.schema.json),
    /// or with `--kind rule-test` of test files (schema/ruletest.schema.json).
    Schema {
        /// Which documents.
        #[arg(long, value_enum, default_value_t = SchemaKind::Rule)]
        kind: SchemaKind,
    },
    /// Run rule tests offline: each case of each `kind: RuleTest` document plans a parent and
    /// checks children, prunes, actions, status or an expected error. One PASS/FAIL line per
    /// case with its file:line, the first mismatch of a failure, a summary. Exit 0 when all
    /// pass, 1 when any fails, 2 when nothing could be run.
    Test {
        #[command(flatten)]
        sources: Sources,
        /// Test files, or directories searched recursively for YAML files with RuleTest
        /// documents (default: --tests).
        paths: Vec<PathBuf>,
        /// The test directory used when no PATH is given (default: `tests/` beside the rules
        /// directory).
        #[arg(long = "tests", env = "RULEOP_TESTS")]
        tests_dir: Option<PathBuf>,
        /// Also write the results as JUnit XML to this file.
        #[arg(long, env = "RULEOP_JUNIT")]
        junit: Option<PathBuf>,
    },
    /// Show what a proposed rule set would change in the live cluster, without writing: per
    /// parent a unified diff of each child's managed fields (live vs a server-side apply dry
    /// run), children created and pruned, actions that would run, the status change.
    /// Exit 0: no change; 1: changes; 2: error.
    ///
    /// Permissions: get, list on the watched kinds; list and patch (server-side apply with
    /// dryRun=All, which the API server never persists) on child kinds, plus create for
    /// children that do not exist yet; get on looked-up kinds; API discovery.
    Diff {
        #[command(flatten)]
        sources: Sources,
        /// Only parents in this namespace (default: all namespaces).
        #[arg(long, short = 'n', env = "RULEOP_NAMESPACE")]
        namespace: Option<String>,
        /// Only parents matching this label selector (as well as the rule's own).
        #[arg(long, short = 'l')]
        selector: Option<String>,
        /// The time stamped on changed conditions (RFC 3339; default: now).
        #[arg(long, env = "RULEOP_NOW")]
        now: Option<String>,
    },
}

/// Which JSON Schema `ruleop schema` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SchemaKind {
    /// `kind: Rule` documents.
    Rule,
    /// `kind: RuleTest` documents.
    RuleTest,
}

/// How `render` prints the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// Children as YAML documents; everything else as `#` comments.
    Yaml,
    /// The whole plan as one JSON object.
    Json,
}

/// How `run` writes logs (level filter from RUST_LOG, default `info`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}
