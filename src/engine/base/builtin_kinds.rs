//! The built-in kinds known offline: their resource names (plurals), which are cluster-scoped,
//! and checks of a rendered built-in kind against the k8s-openapi types, so a mistyped field
//! (`replicas: "three"`) or an unknown one (`prots:`) is caught with its path before anything
//! reaches the API server, and one bad child cannot leave a partially applied set behind.

use serde_json::Value;

/// Checks `object` against the typed schema of its built-in kind; `Ok` for kinds not known here
/// (custom resources are checked by the API server's strict field validation on apply).
pub(crate) fn check_types(object: &Value) -> Result<(), String> {
    use k8s_openapi::api::{apps, batch, core, networking, policy, rbac};
    let api_version = object.get("apiVersion").and_then(Value::as_str).unwrap_or_default();
    let kind = object.get("kind").and_then(Value::as_str).unwrap_or_default();
    match (api_version, kind) {
        ("v1", "Service") => typed::<core::v1::Service>(object),
        ("v1", "ConfigMap") => typed::<core::v1::ConfigMap>(object),
        ("v1", "Secret") => typed::<core::v1::Secret>(object),
        ("v1", "ServiceAccount") => typed::<core::v1::ServiceAccount>(object),
        ("v1", "PersistentVolumeClaim") => typed::<core::v1::PersistentVolumeClaim>(object),
        ("v1", "Pod") => typed::<core::v1::Pod>(object),
        ("v1", "Namespace") => typed::<core::v1::Namespace>(object),
        ("v1", "ResourceQuota") => typed::<core::v1::ResourceQuota>(object),
        ("v1", "LimitRange") => typed::<core::v1::LimitRange>(object),
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
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => typed::<rbac::v1::ClusterRole>(object),
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => typed::<rbac::v1::ClusterRoleBinding>(object),
        _ => Ok(()),
    }
}

/// The resource name (plural) of a built-in kind, e.g. `statefulsets` for `apps/v1 StatefulSet`.
pub(crate) fn plural(api_version: &str, kind: &str) -> Option<&'static str> {
    use k8s_openapi::Resource;
    use k8s_openapi::api::{apps, batch, core, networking, policy, rbac};
    Some(match (api_version, kind) {
        ("v1", "Service") => core::v1::Service::URL_PATH_SEGMENT,
        ("v1", "ConfigMap") => core::v1::ConfigMap::URL_PATH_SEGMENT,
        ("v1", "Secret") => core::v1::Secret::URL_PATH_SEGMENT,
        ("v1", "ServiceAccount") => core::v1::ServiceAccount::URL_PATH_SEGMENT,
        ("v1", "PersistentVolumeClaim") => core::v1::PersistentVolumeClaim::URL_PATH_SEGMENT,
        ("v1", "Pod") => core::v1::Pod::URL_PATH_SEGMENT,
        ("v1", "Namespace") => core::v1::Namespace::URL_PATH_SEGMENT,
        ("v1", "ResourceQuota") => core::v1::ResourceQuota::URL_PATH_SEGMENT,
        ("v1", "LimitRange") => core::v1::LimitRange::URL_PATH_SEGMENT,
        ("apps/v1", "StatefulSet") => apps::v1::StatefulSet::URL_PATH_SEGMENT,
        ("apps/v1", "Deployment") => apps::v1::Deployment::URL_PATH_SEGMENT,
        ("apps/v1", "DaemonSet") => apps::v1::DaemonSet::URL_PATH_SEGMENT,
        ("batch/v1", "Job") => batch::v1::Job::URL_PATH_SEGMENT,
        ("batch/v1", "CronJob") => batch::v1::CronJob::URL_PATH_SEGMENT,
        ("networking.k8s.io/v1", "Ingress") => networking::v1::Ingress::URL_PATH_SEGMENT,
        ("networking.k8s.io/v1", "NetworkPolicy") => networking::v1::NetworkPolicy::URL_PATH_SEGMENT,
        ("policy/v1", "PodDisruptionBudget") => policy::v1::PodDisruptionBudget::URL_PATH_SEGMENT,
        ("rbac.authorization.k8s.io/v1", "Role") => rbac::v1::Role::URL_PATH_SEGMENT,
        ("rbac.authorization.k8s.io/v1", "RoleBinding") => rbac::v1::RoleBinding::URL_PATH_SEGMENT,
        ("rbac.authorization.k8s.io/v1", "ClusterRole") => rbac::v1::ClusterRole::URL_PATH_SEGMENT,
        ("rbac.authorization.k8s.io/v1", "ClusterRoleBinding") => rbac::v1::ClusterRoleBinding::URL_PATH_SEGMENT,
        _ => return None,
    })
}

/// Whether a built-in kind is cluster-scoped (offline knowledge; `ruleop run` asks discovery).
pub(crate) fn is_cluster_scoped(api_version: &str, kind: &str) -> bool {
    matches!(
        (api_version, kind),
        ("v1", "Namespace" | "PersistentVolume" | "Node")
            | ("rbac.authorization.k8s.io/v1", "ClusterRole" | "ClusterRoleBinding")
            | ("storage.k8s.io/v1", "StorageClass")
            | ("scheduling.k8s.io/v1", "PriorityClass")
            | ("apiextensions.k8s.io/v1", "CustomResourceDefinition")
    )
}

fn typed<T: serde::de::DeserializeOwned + serde::Serialize>(object: &Value) -> Result<(), String> {
    let parsed: T =
        serde_path_to_error::deserialize(object).map_err(|e| format!("field {}: {}", e.path(), e.inner()))?;
    let round_trip = serde_json::to_value(&parsed).map_err(|e| e.to_string())?;
    match first_unknown_field(object, &round_trip, "") {
        Some(path) => Err(format!("unknown field {path}")),
        None => Ok(()),
    }
}

/// The first field of `rendered` that the typed round trip dropped: a field the kind does not have.
fn first_unknown_field(rendered: &Value, round_trip: &Value, path: &str) -> Option<String> {
    match (rendered, round_trip) {
        (Value::Object(rendered), Value::Object(kept)) => rendered.iter().find_map(|(key, value)| {
            let here = if path.is_empty() {
                key.clone()
            } else {
                format!("{path}.{key}")
            };
            match kept.get(key) {
                Some(kept) => first_unknown_field(value, kept, &here),
                None if value.is_null() => None,
                None => Some(here),
            }
        }),
        (Value::Array(rendered), Value::Array(kept)) => rendered
            .iter()
            .zip(kept)
            .enumerate()
            .find_map(|(i, (value, kept))| first_unknown_field(value, kept, &format!("{path}[{i}]"))),
        _ => None,
    }
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
    fn unknown_field_is_reported_with_its_path() {
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a", "labels": {"x": "y"}},
            "spec": {"ports": [{"port": 1, "protocol": "TCP"}, {"prot": 2}]}});
        assert_eq!(check_types(&svc), Err("unknown field spec.ports[1].prot".to_owned()));
    }

    #[test]
    fn complete_objects_pass() {
        let svc = json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "a"},
            "spec": {"selector": {"app": "a"}, "ports": [{"name": "pg", "port": 5432, "targetPort": 5432}]}});
        assert_eq!(check_types(&svc), Ok(()));
    }

    #[test]
    fn unknown_kinds_pass() {
        assert_eq!(
            check_types(&json!({"apiVersion": "myorg.io/v1", "kind": "X", "spec": 1})),
            Ok(())
        );
    }
}
