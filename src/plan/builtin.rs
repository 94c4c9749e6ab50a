//! Offline type checks of rendered built-in kinds against the k8s-openapi types, so a mistyped
//! field (`replicas: "three"`) is caught with its path before anything reaches the API server.

use serde_json::Value;

/// Checks `object` against the typed schema of its built-in kind; `Ok` for kinds not known here
/// (custom resources are checked by the API server's strict field validation on apply).
pub fn check_types(object: &Value) -> Result<(), String> {
    use k8s_openapi::api::{apps, batch, core, networking, policy, rbac};
    let api_version = object
        .get("apiVersion")
        .and_then(Value::as_str)
        .unwrap_or_default();
    let kind = object
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default();
    match (api_version, kind) {
        ("v1", "Service") => typed::<core::v1::Service>(object),
        ("v1", "ConfigMap") => typed::<core::v1::ConfigMap>(object),
        ("v1", "Secret") => typed::<core::v1::Secret>(object),
        ("v1", "ServiceAccount") => typed::<core::v1::ServiceAccount>(object),
        ("v1", "PersistentVolumeClaim") => typed::<core::v1::PersistentVolumeClaim>(object),
        ("v1", "Pod") => typed::<core::v1::Pod>(object),
        ("apps/v1", "StatefulSet") => typed::<apps::v1::StatefulSet>(object),
        ("apps/v1", "Deployment") => typed::<apps::v1::Deployment>(object),
        ("apps/v1", "DaemonSet") => typed::<apps::v1::DaemonSet>(object),
        ("batch/v1", "Job") => typed::<batch::v1::Job>(object),
        ("batch/v1", "CronJob") => typed::<batch::v1::CronJob>(object),
        ("networking.k8s.io/v1", "Ingress") => typed::<networking::v1::Ingress>(object),
        ("networking.k8s.io/v1", "NetworkPolicy") => typed::<networking::v1::NetworkPolicy>(object),
        ("policy/v1", "PodDisruptionBudget") => typed::<policy::v1::PodDisruptionBudget>(object),
        ("rbac.authorization.k8s.io/v1", "Role") => typed::<rbac::v1::Role>(object),
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => typed::<rbac::v1::RoleBinding>(object),
        _ => Ok(()),
    }
}

fn typed<T: serde::de::DeserializeOwned>(object: &Value) -> Result<(), String> {
    serde_path_to_error::deserialize::<_, T>(object)
        .map(drop)
        .map_err(|e| format!("field {}: {}", e.path(), e.inner()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn mistyped_field_is_reported_with_its_path() {
        let sts = json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": {"name": "a"},
            "spec": {"replicas": "three", "selector": {}, "serviceName": "a", "template": {}}});
        let err = check_types(&sts).expect_err("replicas is a string");
        assert!(
            err.starts_with("field spec.replicas: invalid type: string \"three\""),
            "{err}"
        );
    }

    #[test]
    fn unknown_kinds_pass() {
        assert_eq!(
            check_types(&json!({"apiVersion": "myorg.io/v1", "kind": "X", "spec": 1})),
            Ok(())
        );
    }
}
