"""The Database operator of rules/database.yaml + templates/database/, hand-written with kopf.

Measurement code for `ruleop-bench convergence` (the "peer"), not product. On create, update and
resume of a Database (myorg.io/v1): create or patch a Service and a StatefulSet of the same
shape as templates/database/*.j2 (owner references via kopf.adopt), create the backup Job once
per metadata.generation (guarded by status.actions.backup.guardValue), and write
status.observedGeneration, endpoint and conditions (through kopf's patch, one status write).

Written the way kopf operators usually are: the official `kubernetes` client (sync handlers run
in kopf's thread pool), create and on 409 patch, kopf's default settings (progress annotations,
k8s Events for handler results). Every handler run appends "<unix time> <reason> <name>" to the
file in $BENCH_KOPF_MARKS, which the benchmark counts like ruleop_reconciles_total.
"""

import datetime
import os
import threading

import kopf
import kubernetes
from kubernetes.client.rest import ApiException

_MARKS = os.environ.get("BENCH_KOPF_MARKS")
_MARKS_LOCK = threading.Lock()
_CLIENTS = {}


def _clients():
    if not _CLIENTS:
        kubernetes.config.load_kube_config()
        api = kubernetes.client.ApiClient()
        _CLIENTS["core"] = kubernetes.client.CoreV1Api(api)
        _CLIENTS["apps"] = kubernetes.client.AppsV1Api(api)
        _CLIENTS["batch"] = kubernetes.client.BatchV1Api(api)
    return _CLIENTS


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, **_):
    _clients()


def _service(name, spec):
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": f"{name}-svc", "labels": {"app": name}},
        "spec": {
            "selector": {"app": name},
            "ports": [{"name": "postgres", "port": 5432, "targetPort": 5432}],
        },
    }


def _statefulset(name, spec):
    resources = spec.get("resources") or {}
    storage = spec.get("storage") or {}
    claim_spec = {
        "accessModes": ["ReadWriteOnce"],
        "resources": {"requests": {"storage": storage.get("size")}},
    }
    if storage.get("className"):
        claim_spec["storageClassName"] = storage["className"]
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name, "labels": {"app": name}},
        "spec": {
            "serviceName": f"{name}-svc",
            "replicas": spec.get("replicas", 1),
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {
                    "containers": [
                        {
                            "name": "postgres",
                            "image": f"postgres:{spec['version']}",
                            "ports": [{"name": "postgres", "containerPort": 5432}],
                            "env": [
                                {"name": "PGDATA", "value": "/var/lib/postgresql/data/pgdata"},
                                {
                                    "name": "POSTGRES_PASSWORD",
                                    "valueFrom": {
                                        "secretKeyRef": {
                                            "name": spec.get("credentialsSecret", f"{name}-credentials"),
                                            "key": "password",
                                        }
                                    },
                                },
                            ],
                            "readinessProbe": {
                                "exec": {"command": ["pg_isready", "-U", "postgres"]},
                                "initialDelaySeconds": 5,
                                "periodSeconds": 10,
                            },
                            "livenessProbe": {
                                "tcpSocket": {"port": 5432},
                                "initialDelaySeconds": 30,
                                "periodSeconds": 20,
                            },
                            "resources": {
                                "requests": {
                                    "cpu": resources.get("cpu", "250m"),
                                    "memory": resources.get("memory", "512Mi"),
                                }
                            },
                            "volumeMounts": [{"name": "data", "mountPath": "/var/lib/postgresql/data"}],
                        }
                    ]
                },
            },
            "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": claim_spec}],
        },
    }


def _backup_job(name, spec, generation):
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": f"{name}-backup-g{generation}", "labels": {"app": name}},
        "spec": {
            "backoffLimit": 2,
            "template": {
                "metadata": {"labels": {"app": f"{name}-backup"}},
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [
                        {
                            "name": "backup",
                            "image": f"postgres:{spec['version']}",
                            "command": [
                                "sh",
                                "-c",
                                'pg_dump -h "$PGHOST" -U postgres -Fc -f /tmp/dump.pgc postgres',
                            ],
                            "env": [
                                {"name": "PGHOST", "value": f"{name}-svc"},
                                {"name": "BACKUP_KEY", "value": f"generation={generation}"},
                                {
                                    "name": "BACKUP_SCHEDULE",
                                    "value": (spec.get("backup") or {}).get("schedule", "on-change"),
                                },
                            ],
                        }
                    ],
                },
            },
        },
    }


def _create_or_patch(create, patch, namespace, obj):
    try:
        create(namespace, obj)
    except ApiException as e:
        if e.status != 409:
            raise
        patch(obj["metadata"]["name"], namespace, obj)


def _mark(reason, name):
    if _MARKS:
        with _MARKS_LOCK, open(_MARKS, "a") as f:
            f.write(f"{datetime.datetime.now().timestamp():.3f} {reason} {name}\n")


@kopf.on.resume("myorg.io", "v1", "databases")
@kopf.on.create("myorg.io", "v1", "databases")
@kopf.on.update("myorg.io", "v1", "databases")
def reconcile(body, spec, meta, status, name, namespace, patch, reason, **_):
    c = _clients()
    generation = meta["generation"]
    service = _service(name, spec)
    statefulset = _statefulset(name, spec)
    kopf.adopt([service, statefulset], owner=body)
    _create_or_patch(c["core"].create_namespaced_service, c["core"].patch_namespaced_service, namespace, service)
    _create_or_patch(
        c["apps"].create_namespaced_stateful_set, c["apps"].patch_namespaced_stateful_set, namespace, statefulset
    )

    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    guard = f"generation={generation}"
    backup = (status.get("actions") or {}).get("backup") or {}
    conditions = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
    conditions.insert(
        0,
        {
            "type": "Ready",
            "status": "False",
            "reason": "ReplicasNotReady",
            "message": f"0/{spec.get('replicas', 1)} replicas ready",
            "lastTransitionTime": now,
            "observedGeneration": generation,
        },
    )
    if (spec.get("backup") or {}).get("enabled") and backup.get("guardValue") != guard:
        job = _backup_job(name, spec, generation)
        kopf.adopt(job, owner=body)
        try:
            c["batch"].create_namespaced_job(namespace, job)
        except ApiException as e:
            if e.status != 409:
                raise
        patch.status["actions"] = {"backup": {"guardValue": guard, "phase": "Done", "completedAt": now}}
        patch.status["lastBackupTime"] = now
        conditions = [c for c in conditions if c.get("type") != "BackupInitiated"]
        conditions.append({"type": "BackupInitiated", "status": "True", "reason": "AsExpected", "lastTransitionTime": now})
    patch.status["observedGeneration"] = generation
    patch.status["endpoint"] = f"{name}-svc.{namespace}.svc:5432"
    patch.status["conditions"] = conditions
    _mark(str(reason), name)
