//! Reading the Secret keys `http` headers name (`valueFrom.secretKeyRef`), just before a request
//! is sent: the value goes only into that request's header, never into a plan, status, Event or log.

use k8s_openapi::api::core::v1::Secret;
use kube::Api;

use super::Cluster;
use crate::engine::rules::model::SecretKeyRef;

/// `Secret <namespace>/<name> key <key>`, for messages (never the value).
pub(crate) fn describe(reference: &SecretKeyRef) -> String {
    format!(
        "Secret {}/{} key {}",
        reference.namespace.as_deref().unwrap_or_default(),
        reference.name,
        reference.key
    )
}

/// The bytes under the reference's key.
pub(crate) async fn read_key(cluster: &Cluster<'_>, reference: &SecretKeyRef) -> Result<Vec<u8>, String> {
    let Some(namespace) = reference.namespace.as_deref().filter(|ns| !ns.is_empty()) else {
        return Err(format!(
            "Secret {} has no namespace (a cluster-scoped parent's rule must name one)",
            reference.name
        ));
    };
    let api: Api<Secret> = Api::namespaced(cluster.client.clone(), namespace);
    let secret = match api.get_opt(&reference.name).await {
        Ok(Some(secret)) => secret,
        Ok(None) => return Err(format!("{} not found", describe(reference))),
        Err(e) => {
            return Err(format!(
                "{} could not be read: {}",
                describe(reference),
                super::api_error::describe(&e)
            ));
        }
    };
    secret
        .data
        .and_then(|mut data| data.remove(&reference.key))
        .map(|bytes| bytes.0)
        .ok_or_else(|| format!("{} is missing", describe(reference)))
}
