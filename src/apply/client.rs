//! The cluster connection every ruleop client uses: the inferred kubeconfig or in-cluster
//! configuration, with a `ruleop/<version>` user agent so the API server's audit log and
//! access logs name ruleop's requests, over HTTP/2 when the API server offers it.

use std::time::Duration;

use http::{HeaderValue, header::USER_AGENT};
use http_body_util::BodyExt;
use hyper_rustls::{FixedServerNameResolver, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder, ConfigExt, DynBody, RustlsTlsError};
use kube::config::InferConfigError;
use kube::{Client, Config};
use tower::retry::RetryLayer;
use tower::util::BoxService;
use tower::{BoxError, ServiceBuilder, ServiceExt};

/// The user agent of every request ruleop sends to the API server.
pub(crate) const RULEOP_USER_AGENT: &str = concat!("ruleop/", env!("CARGO_PKG_VERSION"));

/// How long an HTTP/2 connection may go without a frame from the API server before it is
/// pinged, and how long the ping may go unanswered before the connection is given up (its
/// requests fail and are retried on a new one). client-go's defaults (30 s and 15 s): a
/// connection whose peer vanished without a reset (a node lost, a load balancer that dropped
/// it) is found within 45 s instead of waiting for the kernel's TCP timeout.
const PING_IDLE: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(15);

/// A client's request stack: kube's own type for it (`kube::client::GenericService`, not exported).
pub(crate) type Stack = BoxService<http::Request<Body>, http::Response<Box<DynBody>>, BoxError>;

/// The configuration `kube::Config::infer` finds, naming ruleop as the user agent.
pub(crate) async fn cluster_config() -> Result<Config, InferConfigError> {
    let mut config = Config::infer().await?;
    config
        .headers
        .push((USER_AGENT, HeaderValue::from_static(RULEOP_USER_AGENT)));
    Ok(config)
}

/// A client of `config` (see [`client_builder`]).
pub(crate) fn connect(config: &Config) -> Result<Client, kube::Error> {
    Ok(client_builder(config)?.build())
}

/// The request stack of a client of `config`, to add layers to.
///
/// The TLS handshake offers HTTP/2 first (ALPN), and kube-apiserver takes it: every request and
/// watch of the client then shares one connection, where kube's own stack speaks HTTP/1.1 and
/// holds a connection (with its TLS state and buffers) per request in flight, kept in its pool
/// after a burst. A server that answers HTTP/1.1 gets HTTP/1.1. A configuration with a proxy or
/// an exec credential plugin gets kube's stack unchanged (it tunnels through the proxy and
/// renews the plugin's client certificate before it expires).
pub(crate) fn client_builder(config: &Config) -> Result<ClientBuilder<Stack>, kube::Error> {
    if config.proxy_url.is_some() || config.auth_info.exec.is_some() {
        return ClientBuilder::try_from(config.clone());
    }
    let mut tcp = HttpConnector::new();
    tcp.enforce_http(false);
    tcp.set_nodelay(true);
    tcp.set_connect_timeout(config.connect_timeout);
    let mut tls = HttpsConnectorBuilder::new()
        .with_tls_config(config.rustls_client_config()?)
        .https_or_http();
    if let Some(name) = &config.tls_server_name {
        let name = name
            .clone()
            .try_into()
            .map_err(|e| kube::Error::RustlsTls(RustlsTlsError::InvalidServerName(e)))?;
        tls = tls.with_server_name_resolver(FixedServerNameResolver::new(name));
    }
    let connections = hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .timer(TokioTimer::new())
        .pool_timer(TokioTimer::new())
        .http2_keep_alive_interval(PING_IDLE)
        .http2_keep_alive_timeout(PING_TIMEOUT)
        .build(tls.enable_all_versions().wrap_connector(tcp));
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(
            config
                .default_retry
                .then(|| RetryLayer::new(RetryPolicy::server_retry())),
        )
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(connections)
        .map_response(|response| response.map(|body| Box::new(body.map_err(BoxError::from)) as Box<DynBody>))
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace.clone()))
}
