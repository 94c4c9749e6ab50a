//! Command line: `ruleop check | render | schema` (and `run` once the live engine lands).
//! Every flag can also be set through the environment variable named in `--help`.

use std::path::PathBuf;

use std::time::Duration;

use clap::builder::{PossibleValuesParser, TypedValueParser as _};
use clap::{Parser, Subcommand, ValueEnum};

use crate::cache::watch::InitialList;
use crate::engine::duration;
use crate::ha::leader::{DEFAULT_LEASE_DURATION, DEFAULT_RENEW_DEADLINE, DEFAULT_RETRY_PERIOD, MAX_SHARDS, Timing};

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

/// Where the schemas of custom resource kinds come from, for the offline commands.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SchemaSources {
    /// CRD files or directories (walked for *.yaml, *.yml) whose schemas type the parent's reads,
    /// status writes and custom resource children, and whose defaults apply to a parent before
    /// it is planned, as the API server does. Repeat the flag or separate paths with commas.
    /// Default: deploy/crds beside the rules directory, or else crds beside it, when one exists.
    #[arg(long = "crds", env = "RULEOP_CRDS", value_delimiter = ',')]
    pub crds: Vec<PathBuf>,
}

impl SchemaSources {
    /// The paths to read: the ones given, or `deploy/crds` (else `crds`) beside `rules`.
    pub fn paths(&self, rules: &std::path::Path) -> Vec<PathBuf> {
        if !self.crds.is_empty() {
            return self.crds.clone();
        }
        let beside = rules.parent().unwrap_or(std::path::Path::new(""));
        [beside.join("deploy").join("crds"), beside.join("crds")]
            .into_iter()
            .find(|dir| dir.is_dir())
            .into_iter()
            .collect()
    }
}

/// The subcommands.
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

// No `///` here or on the flattened fields: clap would make them help text.
#[allow(missing_docs)]
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the operator: one controller per rule, reconciling every watched parent. Uses the
    /// kubeconfig (KUBECONFIG or ~/.kube/config) or the in-cluster service account.
    #[command(after_long_help = RUN_METRICS_HELP)]
    Run(Box<RunArgs>),
    /// Validate every rule and template; print each problem as file:line:col and exit 1 if any.
    Check {
        #[command(flatten)]
        sources: Sources,
        #[command(flatten)]
        schemas: SchemaSources,
    },
    /// Plan one custom resource offline: print its children as multi-document YAML, then the
    /// prune list, action decisions (with reasons) and the status patch as comments.
    Render {
        #[command(flatten)]
        sources: Sources,
        #[command(flatten)]
        schemas: SchemaSources,
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
        /// Render under kept revision N of the parent's rule instead of the files: its rule and
        /// templates are read from the cluster (ConfigMap ruleop-rev-<rule>-<N> in
        /// --status-namespace; `ruleop rollout history` lists them). The rule is the one the
        /// files give the parent's kind; the CRDs are still read from the files.
        #[arg(long, value_name = "N")]
        revision: Option<u64>,
        /// Namespace of the kept revisions (ruleop's own), with --revision.
        #[arg(long, env = "RULEOP_STATUS_NAMESPACE", default_value = "ruleop-system")]
        status_namespace: String,
    },
    /// Print the CRD of every rule that carries `spec.schema` (group, version and kind from
    /// `watch`, the status the engine writes, printer columns, short names); `ruleop check`
    /// fails while the committed copy (in --crds) differs.
    Crd {
        #[command(flatten)]
        sources: Sources,
    },
    /// Print the minimal ClusterRole the rules need (committed as deploy/helm/ruleop/files/clusterrole.yaml).
    Rbac {
        #[command(flatten)]
        sources: Sources,
        /// The CRDs give the plurals of custom kinds.
        #[command(flatten)]
        schemas: SchemaSources,
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
        #[command(flatten)]
        schemas: SchemaSources,
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
        /// Diff kept revision N of --rule instead of the files: what putting it back would change
        /// (read from ConfigMap ruleop-rev-<rule>-<N> in --status-namespace).
        #[arg(long, value_name = "N", requires = "rule")]
        revision: Option<u64>,
        /// The rule whose kept revision --revision names.
        #[arg(long, requires = "revision")]
        rule: Option<String>,
        /// Namespace of the kept revisions (ruleop's own), with --revision.
        #[arg(long, env = "RULEOP_STATUS_NAMESPACE", default_value = "ruleop-system")]
        status_namespace: String,
    },
    /// Show the live tree of one parent, read-only: the rule watching its kind, generation and
    /// observedGeneration, every condition with its full message, the cleanup finalizer and what
    /// holds a deletion; then each child as the operator plans it now (exists, ready and the
    /// readyWhen deciding it, waiting on dependsOn, held by scaling or updateStrategy, drift of
    /// its managed fields against a server-side apply dry run, owned by ownerReference or
    /// labels), forEach items (folded after 20), actions with their records, lookups, and the
    /// parent's last Events. A Secret child shows its name and data keys only.
    /// Exit 0: the parent is Ready; 1: not Ready; 2: error (not found, no rule watches the kind).
    /// Also runs as `kubectl ruleop trace` (an executable `kubectl-ruleop` on PATH).
    ///
    /// Permissions: get on the watched kind (list, to name the parents when one is not found);
    /// list on child kinds in all namespaces; patch (server-side apply with dryRun=All, never
    /// persisted) on child kinds whose live object differs from the rendering; get or list on
    /// looked-up kinds; list on Events; API discovery.
    #[command(after_long_help = TRACE_EXAMPLES)]
    Trace {
        #[command(flatten)]
        sources: Sources,
        /// The parent, as KIND/NAME: the kind by name, plural or plural.group, any case
        /// (database/orders, databases.myorg.io/orders).
        target: String,
        /// The parent's namespace (default: the kubeconfig context's).
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// Redraw whenever anything changes, until Ctrl-C: the cluster is read again every 2 s
        /// (polling, not a watch).
        #[arg(long, short = 'w')]
        watch: bool,
        /// Output format: a tree (colours and symbols on a terminal, plain when piped), or the
        /// whole trace as one JSON or YAML document (the same model).
        #[arg(long, short = 'o', value_enum, default_value_t = TraceOutput::Tree)]
        output: TraceOutput,
    },
    /// Print a generated reference page as Markdown (committed as docs/reference/cli.md and
    /// docs/reference/metrics.md; `make generate`).
    /// Show what ruleop is doing, read-only: the last reload (the `ruleop-status` ConfigMap),
    /// the Leases and who holds them, and per rule its parents by Ready, the ones not Ready the
    /// longest (with reason and message) and the ones ruleop has not caught up with. Exit 0 when
    /// the last reload loaded and every parent is Ready, 1 when not, 2 on error.
    Status {
        #[command(flatten)]
        sources: Sources,
        /// Namespace of the `ruleop-status` ConfigMap and the Leases (ruleop's own namespace).
        #[arg(long, env = "RULEOP_STATUS_NAMESPACE", default_value = "ruleop-system")]
        status_namespace: String,
        /// Only count and list parents in this namespace (default: all namespaces).
        #[arg(long, short = 'n')]
        namespace: Option<String>,
        /// Output format.
        #[arg(long, short = 'o', value_enum, default_value_t = StatusOutput::Text)]
        output: StatusOutput,
    },
    /// Staged rollouts and kept rule revisions in the cluster.
    ///
    /// `status` shows each rule's revision in force and its rollout (step, phase, the parents
    /// that failed and why); `history` lists the kept revisions, each with a unified diff of its
    /// changed files against the one before. Both only read. Exit 1 when `status` finds a rollout
    /// halted (not paused) or rolled back, 2 on error.
    ///
    /// `pause`, `resume` and `undo` ask the running operator (the leader) to change a rule's
    /// rollout: a request ConfigMap `ruleop-rollout-<rule>` in --status-namespace, which the
    /// operator follows once, records in `ruleop-status` and deletes; this command waits for that
    /// (--wait) and prints the new state. `pause`: no further step and no further parent moves;
    /// the moved parents stay (phase Halted, note "paused"). `resume`: a paused or halted
    /// rollout goes on; its current step's pause starts again and earlier failures are
    /// forgotten. `undo`: every parent of the rule goes back to the previous kept revision (with
    /// a rollout under way: the one it moves from), until the rule's files change again; the
    /// next edit then rolls out from there. RULE may be left out when exactly one rollout is in
    /// progress. Refused with a clear error (exit 2): a rule not in force, pause or resume with
    /// no rollout in progress, resume of a rollout that goes on, undo with no earlier revision
    /// kept. Exit 1 when no operator followed the request within --wait (it stays, and is
    /// followed when one runs).
    Rollout {
        /// What to show or do.
        #[arg(value_enum)]
        show: RolloutShow,
        /// Only this rule (default: every rule; for pause, resume and undo: the one rollout in
        /// progress).
        rule: Option<String>,
        /// Namespace of the `ruleop-status` ConfigMap and the kept revisions (ruleop's own).
        #[arg(long, env = "RULEOP_STATUS_NAMESPACE", default_value = "ruleop-system")]
        status_namespace: String,
        /// How long pause, resume and undo wait for the operator to follow the request.
        #[arg(long, env = "RULEOP_ROLLOUT_WAIT", default_value = "30s", value_parser = crate::cmd::cli::parse_wait)]
        wait: std::time::Duration,
    },
    /// Serve a read-only web console: the rules with the last reload and the parents not Ready
    /// (their messages name the template and line), a rule's parents filtered by namespace and
    /// Ready and paged, and one parent's trace as a graph of its children with their states.
    /// Every page has its JSON under /api/ (`ruleop status -o json`, `ruleop trace -o json`).
    /// GET only; shows no Secret data. Not part of `ruleop run`: off unless this command runs.
    ///
    /// Permissions: those of `ruleop trace` and `ruleop status`.
    Console {
        #[command(flatten)]
        sources: Sources,
        /// Address to serve on (keep it on loopback, or put it behind your own authentication:
        /// the console itself authenticates no one).
        #[arg(long, env = "RULEOP_CONSOLE_ADDR", default_value = "127.0.0.1:8081")]
        addr: std::net::SocketAddr,
        /// Namespace of the `ruleop-status` ConfigMap and the Leases (ruleop's own namespace).
        #[arg(long, env = "RULEOP_STATUS_NAMESPACE", default_value = "ruleop-system")]
        status_namespace: String,
    },
    #[command(hide = true)]
    Reference {
        /// Which page.
        page: ReferencePage,
    },
}

/// Examples of `ruleop trace` (`ruleop trace --help`).
const TRACE_EXAMPLES: &str = "\
Examples:
  ruleop trace database/orders -n shop            the tree; exit 0 when Ready
  ruleop trace databases.myorg.io/orders -o json  one JSON document (the Trace model)
  kubectl ruleop trace database/orders --watch    redraw every 2 s while something changes
See docs/reference/trace.md for what each part of the output means.";

/// How `trace` prints the parent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum TraceOutput {
    /// An indented tree.
    Tree,
    /// The Trace model as JSON.
    Json,
    /// The Trace model as YAML.
    Yaml,
}

/// What `rollout` shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum RolloutShow {
    /// Each rule's revision in force and its rollout's state.
    Status,
    /// The kept revisions with the diffs of their files.
    History,
    /// Stop the rule's rollout where it is.
    Pause,
    /// Let a paused or halted rollout go on.
    Resume,
    /// Put every parent back on the previous revision until the files change again.
    Undo,
}

/// A duration such as `30s` or `2m` (at least 1s).
pub(crate) fn parse_wait(text: &str) -> Result<std::time::Duration, String> {
    crate::engine::duration::parse_at_least(text, std::time::Duration::from_secs(1))
}

/// How `status` prints its report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StatusOutput {
    /// Lines for people.
    Text,
    /// The Status model as JSON.
    Json,
}

/// Which page `ruleop reference` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ReferencePage {
    /// Every subcommand and flag (docs/reference/cli.md).
    Cli,
    /// Every metric family (docs/reference/metrics.md).
    Metrics,
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

/// The flags of `ruleop run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    #[allow(missing_docs)] // a `///` on a flattened field would become help text
    #[command(flatten)]
    pub sources: Sources,
    /// Only watch objects in this namespace (default: all namespaces).
    #[arg(long, env = "RULEOP_NAMESPACE")]
    pub namespace: Option<String>,
    /// Resync period for rules that set no `resync` (e.g. 30s, 10m, 1h).
    #[arg(long, env = "RULEOP_DEFAULT_RESYNC", default_value = "10m", value_parser = resync_flag)]
    pub default_resync: Duration,
    /// Listen address of /metrics, /healthz and /readyz.
    #[arg(long, env = "RULEOP_ADMIN_ADDR", default_value = "0.0.0.0:8080")]
    pub admin_addr: std::net::SocketAddr,
    /// Log format.
    #[arg(long, value_enum, env = "RULEOP_LOG_FORMAT", default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Export spans (one trace per reconcile) as OpenTelemetry traces over OTLP/HTTP to
    /// this collector, e.g. http://127.0.0.1:4318 (needs a build with the `otlp` feature;
    /// off by default).
    #[arg(long, env = "RULEOP_OTLP_ENDPOINT")]
    pub otlp_endpoint: Option<String>,
    /// Quiet time after a change in the rule or template directories before reloading.
    #[arg(long, env = "RULEOP_RELOAD_DEBOUNCE", default_value = "500ms", value_parser = duration_flag)]
    pub reload_debounce: Duration,
    /// Re-read the directories this often even without file events (fallback).
    #[arg(long, env = "RULEOP_RELOAD_INTERVAL", default_value = "60s", value_parser = duration_flag)]
    pub reload_interval: Duration,
    /// How long a stop (SIGTERM or SIGINT) may take: in-flight reconciles get most of it, the
    /// leases are released in the rest, and then the process exits whatever is still running.
    /// A second SIGTERM or SIGINT exits at once.
    #[arg(long, env = "RULEOP_SHUTDOWN_TIMEOUT", default_value = "10s", value_parser = duration_flag)]
    pub shutdown_timeout: Duration,
    /// Namespace of the `ruleop-status` ConfigMap that reports the rules in force and the
    /// errors of a rejected edit (default: POD_NAMESPACE, else --namespace, else default).
    #[arg(long, env = "RULEOP_STATUS_NAMESPACE")]
    pub status_namespace: Option<String>,
    /// How each watch lists its kind first: `streaming` (one watch sends every object, then a
    /// bookmark; Kubernetes 1.32+), `paged` (LIST pages of 500, then a watch: any server), or
    /// `auto` (streaming when a probe shows the server offers it, else paged).
    #[arg(long, env = "RULEOP_INITIAL_LIST", default_value = "auto",
          value_parser = PossibleValuesParser::new(InitialList::NAMES).try_map(|name| name.parse::<InitialList>()))]
    pub initial_list: InitialList,
    /// An address range `http` actions never reach through a host name, e.g. the pod and
    /// Service CIDRs (repeat the flag, or separate with commas). Loopback, link-local,
    /// metadata and the API server's own addresses are always refused; only an
    /// `allowedHosts` entry naming the address itself reaches one.
    #[arg(long = "egress-deny-cidr", env = "RULEOP_EGRESS_DENY_CIDR", value_delimiter = ',', value_parser = crate::engine::egress::parse_cidr)]
    pub egress_deny_cidr: Vec<ipnet::IpNet>,
    /// Watched objects (parents, children, looked-up objects) whose JSON is longer than this
    /// are neither cached nor reconciled: counted, logged, a Warning Event on the object, and
    /// a parent gets `Ready=False` (`ObjectTooLarge`). Bytes, or a number with Ki or Mi.
    #[arg(long, env = "RULEOP_MAX_OBJECT_SIZE", default_value = "256Ki", value_parser = crate::cache::watch::parse_size)]
    pub max_object_size: usize,
    /// How many revisions of each rule are kept, with their files, in ConfigMaps
    /// `ruleop-rev-<rule>-<n>` of the status namespace (at least 1).
    #[arg(long, env = "RULEOP_KEEP_REVISIONS", default_value_t = crate::runtime::revisions::DEFAULT_KEEP, value_parser = clap::value_parser!(u16).range(1..=1000).map(usize::from))]
    pub keep_revisions: usize,
    /// Client-side limit on the operator's requests to the API server, per second on average
    /// (0, the default: none; the API server's Priority and Fairness decides, and its 429
    /// answers are retried after the Retry-After it names).
    #[arg(long, env = "RULEOP_KUBE_QPS", default_value_t = 0)]
    pub kube_qps: u32,
    /// Requests allowed at once above --kube-qps (ignored without it).
    #[arg(long, env = "RULEOP_KUBE_BURST", default_value_t = 100)]
    pub kube_burst: u32,
    /// After this many failed reconciles in a row a parent's circuit opens: `Ready=False`
    /// (`CircuitOpen`), its watch events are ignored, and it is tried again every 5 minutes
    /// until a reconcile succeeds (0: never open).
    #[arg(long, env = "RULEOP_CIRCUIT_FAILURES", default_value_t = 10)]
    pub circuit_failures: u32,
    #[allow(missing_docs)]
    #[command(flatten)]
    pub election: Box<ElectionArgs>,
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
pub struct ElectionArgs {
    /// Run as one of several replicas: only the holder of a Lease reconciles and writes; the
    /// others wait, ready, and take over when it is released or expires.
    #[arg(long, env = "RULEOP_LEADER_ELECT")]
    pub leader_elect: bool,
    /// Name of the Lease (with --leader-elect).
    #[arg(long, env = "RULEOP_LEASE_NAME", default_value = "ruleop")]
    pub lease_name: String,
    /// Namespace of the Lease (default: POD_NAMESPACE, else --namespace, else default).
    #[arg(long, env = "RULEOP_LEASE_NAMESPACE")]
    pub lease_namespace: Option<String>,
    /// How long a standby waits after the last renewal it saw before taking the lease.
    #[arg(long, env = "RULEOP_LEASE_DURATION", default_value = DEFAULT_LEASE_DURATION, value_parser = duration_flag)]
    pub lease_duration: Duration,
    /// How long the holder keeps writing after the start of its last successful renewal
    /// (must be shorter than --lease-duration).
    #[arg(long, env = "RULEOP_RENEW_DEADLINE", default_value = DEFAULT_RENEW_DEADLINE, value_parser = duration_flag)]
    pub renew_deadline: Duration,
    /// Time between attempts to acquire or renew the lease.
    #[arg(long, env = "RULEOP_RETRY_PERIOD", default_value = DEFAULT_RETRY_PERIOD, value_parser = duration_flag)]
    pub retry_period: Duration,
    /// Split the parents into this many shards by a stable hash (FNV-1a) of their UID, each
    /// with its own Lease `<lease-name>-shard-<i>`: every replica reconciles the parents of the
    /// shards it holds, up to its fair share (shards / live replicas, rounded up). More than 1
    /// implies leases (--leader-elect is then redundant); 1 with --leader-elect is one Lease
    /// for everything, without it no Lease at all. See docs/operations/sharding.md.
    #[arg(long, env = "RULEOP_SHARDS", default_value_t = 1,
          value_parser = clap::value_parser!(u32).range(1..=MAX_SHARDS as i64))]
    pub shards: u32,
}

impl ElectionArgs {
    /// The timing, checked: `retry_period < renew_deadline < lease_duration`.
    pub fn timing(&self) -> Result<Timing, String> {
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
    pub fn uses_leases(&self) -> bool {
        self.leader_elect || self.shards > 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
