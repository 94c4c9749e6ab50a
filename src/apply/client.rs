//! The cluster connection every ruleop client uses: the inferred kubeconfig or in-cluster
//! configuration, with a `ruleop/<version>` user agent so the API server's audit log and
//! access logs name ruleop's requests.

use http::{HeaderValue, header::USER_AGENT};
use kube::Config;
use kube::config::InferConfigError;

/// The user agent of every request ruleop sends to the API server.
pub(crate) const RULEOP_USER_AGENT: &str = concat!("ruleop/", env!("CARGO_PKG_VERSION"));

/// The configuration `kube::Config::infer` finds, naming ruleop as the user agent.
pub(crate) async fn cluster_config() -> Result<Config, InferConfigError> {
    let mut config = Config::infer().await?;
    config
        .headers
        .push((USER_AGENT, HeaderValue::from_static(RULEOP_USER_AGENT)));
    Ok(config)
}
