//! `ruleop console`: a read-only web console over the live cluster. Rules (with the last reload
//! and the failing parents' messages) → a rule's parents (filtered by namespace and Ready,
//! paged) → one parent's trace as a graph of the parent and its children.
//!
//! Every page is server-rendered HTML ([`pages`], minijinja templates, HTML-escaped) over the
//! same values as the JSON API under `/api/`, which are the values `ruleop status -o json` and
//! `ruleop trace -o json` print. It serves GET only (any other method is 405), shows no Secret
//! data (the trace model shows a Secret child's name and keys only; parents show their Ready
//! condition, never their spec), and does with the cluster only what `trace` does: GET, LIST
//! and dry runs. It is not part of `ruleop run`: nothing serves it unless this command runs.

mod hosts;
pub(crate) mod pages;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Json, Response};
use axum::routing::get;
use kube::Client;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::cache::discovery::Kinds;
use crate::engine::diagnostic::bounded;
use crate::engine::rules::RuleSet;
use crate::inspect::status::{self, Status};
use crate::inspect::tenant_text::clean;
use crate::inspect::trace::model::Trace;
use crate::inspect::trace::{NotFound, Session};
use crate::offline::Sources;

/// Parents on one page of a rule's list.
pub(crate) const PAGE_SIZE: usize = 50;

/// Longest Ready message shown in a parent list.
const MESSAGE_SHOWN: usize = 300;

/// Where to serve and what to read.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The address to listen on.
    pub addr: SocketAddr,
    /// Namespace of the `ruleop-status` ConfigMap and the Leases.
    pub status_namespace: String,
    /// Host names (beyond loopback and the bound address) a request may name.
    pub allowed_hosts: Vec<String>,
}

/// What every request reads: the rules, a client and the resolved kinds.
struct Console {
    /// The rules, loaded once at start.
    set: RuleSet,
    /// The cluster of the kubeconfig.
    client: Client,
    /// Every kind of the rules, resolved.
    kinds: Kinds,
    /// Namespace of the `ruleop-status` ConfigMap and the Leases.
    status_namespace: String,
}

/// `ruleop console`: serves until stopped; returns the exit code (2 when it cannot start).
pub(crate) fn command(sources: &Sources, options: &Options) -> u8 {
    let Some(set) = crate::inspect::live::load_rules(sources, "rules") else {
        return 2;
    };
    let Some(runtime) = crate::inspect::live::runtime() else {
        return 2;
    };
    runtime.block_on(async {
        match serve(set, options).await {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("error: {e:#}");
                2
            }
        }
    })
}

async fn serve(set: RuleSet, options: &Options) -> anyhow::Result<()> {
    let (client, kinds) = crate::inspect::live::connect(&set).await?;
    let listener = tokio::net::TcpListener::bind(options.addr).await?;
    let bound = listener.local_addr()?;
    let console = Arc::new(Console {
        set,
        client,
        kinds,
        status_namespace: options.status_namespace.clone(),
    });
    let hosts = hosts::AllowedHosts::new(bound, &options.allowed_hosts);
    println!(
        "console: http://{bound}/ (read-only; answers requests for {})",
        hosts.names().join(", ")
    );
    tokio::select! {
        () = crate::ops::http::serve_limited(listener, router(console, hosts)) => {}
        _ = tokio::signal::ctrl_c() => {}
    }
    Ok(())
}

/// The routes: HTML pages, and the JSON they are made of under `/api/`. GET (and HEAD) only, for
/// the allowed hosts only ([`hosts`]); no CORS header, so no other origin may read an answer.
fn router(console: Arc<Console>, hosts: hosts::AllowedHosts) -> Router {
    Router::new()
        .route("/", get(home))
        .route("/rules/{rule}", get(parents_page))
        .route("/trace", get(trace_page))
        .route("/api/status", get(api_status))
        .route("/api/rules/{rule}/parents", get(api_parents))
        .route("/api/trace", get(api_trace))
        .with_state(console)
        .layer(axum::middleware::from_fn_with_state(
            Arc::new(hosts),
            hosts::only_allowed_hosts,
        ))
}

// === the values ===

/// One page of a rule's parents.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ParentsPage {
    /// The rule's name.
    pub rule: String,
    /// `apiVersion kind` it watches.
    pub watches: String,
    /// The namespace filter (empty: all).
    pub namespace: String,
    /// The Ready filter (`True`, `False`, `Unknown`, `None`; empty: all).
    pub ready: String,
    /// This page, from 1.
    pub page: usize,
    /// Pages in all (at least 1).
    pub pages: usize,
    /// Parents matching the filters.
    pub total: usize,
    /// The parents of this page, by namespace and name.
    pub items: Vec<ParentRow>,
}

/// One parent in a list.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ParentRow {
    /// Namespace (empty when cluster-scoped).
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its Ready condition's status, or `None` while not set.
    pub ready: String,
    /// The condition's reason.
    pub reason: String,
    /// The condition's message, bounded.
    pub message: String,
    /// The condition's lastTransitionTime.
    pub since: String,
}

/// The filter of the rules page: count and name only the parents of one namespace.
#[derive(Debug, Default, Deserialize)]
struct StatusQuery {
    namespace: Option<String>,
}

/// The filters of a parent list.
#[derive(Debug, Default, Deserialize)]
struct ParentsQuery {
    namespace: Option<String>,
    ready: Option<String>,
    page: Option<usize>,
}

/// Which parent to trace.
#[derive(Debug, Deserialize)]
struct TraceQuery {
    rule: String,
    #[serde(default)]
    namespace: String,
    name: String,
}

/// A request the console cannot answer: the status code and why.
#[derive(Debug)]
pub(crate) struct Failure(StatusCode, String);

impl Failure {
    /// A failure to read the cluster: 404 for a parent that does not exist, else 502.
    fn cluster(e: &anyhow::Error) -> Self {
        let code = if e.downcast_ref::<NotFound>().is_some() {
            StatusCode::NOT_FOUND
        } else {
            StatusCode::BAD_GATEWAY
        };
        Failure(code, clean(&format!("{e:#}")))
    }
}

impl Console {
    async fn status(&self, query: &StatusQuery) -> Result<Status, Failure> {
        let options = status::Options {
            status_namespace: self.status_namespace.clone(),
            namespace: query.namespace.clone().filter(|n| !n.is_empty()),
            json: true,
        };
        status::read_with(&self.client, &self.kinds, &self.set, &options)
            .await
            .map_err(|e| Failure::cluster(&e))
    }

    async fn parents(&self, rule: &str, query: &ParentsQuery) -> Result<ParentsPage, Failure> {
        let found = self.rule(rule)?;
        let namespace = query.namespace.clone().filter(|n| !n.is_empty());
        let parents = crate::inspect::live::list_parents(&self.client, &self.kinds, found, namespace.as_deref(), None)
            .await
            .map_err(|e| Failure::cluster(&e))?;
        let ready = query.ready.clone().filter(|r| !r.is_empty());
        Ok(page_of(&parents, found, namespace, ready, query.page.unwrap_or(1)))
    }

    async fn trace(&self, query: &TraceQuery) -> Result<Trace, Failure> {
        let rule = self.rule(&query.rule)?;
        let session = Session::of(
            self.client.clone(),
            self.kinds.clone(),
            &self.set,
            rule,
            &query.namespace,
            &query.name,
        )
        .map_err(|e| Failure::cluster(&e))?;
        session.trace().await.map_err(|e| Failure::cluster(&e))
    }

    fn rule(&self, name: &str) -> Result<&crate::engine::rules::Rule, Failure> {
        self.set.rules.iter().find(|r| r.name == name).ok_or_else(|| {
            let names: Vec<&str> = self.set.rules.iter().map(|r| r.name.as_str()).collect();
            Failure(
                StatusCode::NOT_FOUND,
                format!(
                    "no rule {:?}; the rules: {}",
                    clean(&bounded(name, 253)),
                    names.join(", ")
                ),
            )
        })
    }
}

/// One page of `parents` (sorted by namespace and name) with the Ready filter applied.
fn page_of(
    parents: &[Value],
    rule: &crate::engine::rules::Rule,
    namespace: Option<String>,
    ready: Option<String>,
    page: usize,
) -> ParentsPage {
    let text = |v: Option<&Value>, ptr: &str| {
        v.and_then(|v| v.pointer(ptr))
            .and_then(Value::as_str)
            .map(|s| clean(&bounded(s, MESSAGE_SHOWN)))
            .unwrap_or_default()
    };
    let rows: Vec<ParentRow> = parents
        .iter()
        .filter_map(|parent| {
            let (state, condition) = status::ready_condition(parent);
            if ready.as_ref().is_some_and(|wanted| *wanted != state) {
                return None;
            }
            Some(ParentRow {
                namespace: text(Some(parent), "/metadata/namespace"),
                name: text(Some(parent), "/metadata/name"),
                ready: state,
                reason: text(condition, "/reason"),
                message: text(condition, "/message"),
                since: text(condition, "/lastTransitionTime"),
            })
        })
        .collect();
    let total = rows.len();
    let pages = total.div_ceil(PAGE_SIZE).max(1);
    let page = page.clamp(1, pages);
    let items = rows.into_iter().skip((page - 1) * PAGE_SIZE).take(PAGE_SIZE).collect();
    let watch = &rule.spec.watch;
    ParentsPage {
        rule: rule.name.clone(),
        watches: format!("{} {}", watch.api_version, watch.kind),
        namespace: namespace.unwrap_or_default(),
        ready: ready.unwrap_or_default(),
        page,
        pages,
        total,
        items,
    }
}

// === the handlers ===

fn json<T: Serialize>(result: Result<T, Failure>) -> Response {
    match result {
        Ok(value) => Json(value).into_response(),
        Err(Failure(code, why)) => (code, Json(serde_json::json!({ "error": why }))).into_response(),
    }
}

fn html(result: Result<String, Failure>) -> Response {
    match result {
        Ok(page) => Html(page).into_response(),
        Err(Failure(code, why)) => (code, Html(pages::error(code, &why))).into_response(),
    }
}

async fn api_status(State(console): State<Arc<Console>>, Query(query): Query<StatusQuery>) -> Response {
    json(console.status(&query).await)
}

async fn api_parents(
    State(console): State<Arc<Console>>,
    Path(rule): Path<String>,
    Query(query): Query<ParentsQuery>,
) -> Response {
    json(console.parents(&rule, &query).await)
}

async fn api_trace(State(console): State<Arc<Console>>, Query(query): Query<TraceQuery>) -> Response {
    json(console.trace(&query).await)
}

async fn home(State(console): State<Arc<Console>>, Query(query): Query<StatusQuery>) -> Response {
    let namespace = query.namespace.clone().unwrap_or_default();
    html(console.status(&query).await.and_then(|s| pages::home(&s, &namespace)))
}

async fn parents_page(
    State(console): State<Arc<Console>>,
    Path(rule): Path<String>,
    Query(query): Query<ParentsQuery>,
) -> Response {
    html(console.parents(&rule, &query).await.and_then(|p| pages::parents(&p)))
}

async fn trace_page(State(console): State<Arc<Console>>, Query(query): Query<TraceQuery>) -> Response {
    html(console.trace(&query).await.and_then(|t| pages::trace(&t)))
}
