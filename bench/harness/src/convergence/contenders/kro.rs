//! The kro peer: kro's controller (github.com/kubernetes-sigs/kro, `go install`ed at
//! [`KRO_VERSION`] into target/ by bench/run.sh) running out of cluster against the benchmark's
//! kubeconfig, with bench/kro/database-rgd.yaml: the Database children (Service, StatefulSet) as a
//! ResourceGraphDefinition whose generated CRD is `databases.kro.myorg.io`.
//!
//! kro has no one-shot actions (bench/kro/database-rgd.yaml says what it cannot express), so it is
//! compared on the children alone, beside `ruleop-children`; its parent is done when kro has
//! written `status.state: ACTIVE`.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail, ensure};
use futures::future::BoxFuture;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DynamicObject};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
use tokio::process::Command;

use super::{Contender, Launch, Reconciles, Setup, free_port};
use crate::convergence::parents::{KRO_DATABASE, ParentKind};
use crate::convergence::phases::Ctx;

/// The pinned kro release (on the Go module proxy, no replace directives).
pub const KRO_VERSION: &str = "v0.9.4";

/// The kro contender.
pub struct Kro;

/// The one kro peer.
pub static KRO: Kro = Kro;

impl Kro {
    /// Where bench/run.sh installs it: target/kro-<version>/{bin/controller, crds/}.
    fn home(ctx: &Ctx<'_>) -> PathBuf {
        ctx.settings.root.join(format!("target/kro-{KRO_VERSION}"))
    }
}

impl Contender for Kro {
    fn name(&self) -> &'static str {
        "kro"
    }

    fn describe(&self) -> String {
        format!(
            "kro {KRO_VERSION} (`go install github.com/kubernetes-sigs/kro/cmd/controller@{KRO_VERSION}`) out of \
             cluster with [`bench/kro/database-rgd.yaml`](../kro/database-rgd.yaml): Service + StatefulSet, no \
             backup; kro's defaults except `--dynamic-controller-concurrent-reconciles` = \
             `BENCH_FLOOR_CONCURRENCY` (ruleop's maxConcurrentReconciles; kro's default is 1) and \
             `--zap-log-level=info` (as its Helm chart deploys it); it watches all namespaces; done when \
             `status.state` is ACTIVE"
        )
    }

    fn parent(&self) -> &'static ParentKind {
        &KRO_DATABASE
    }

    fn runs_backup(&self) -> bool {
        false
    }

    fn parent_done(&self, parent: &DynamicObject) -> bool {
        parent.data.pointer("/status/state").and_then(Value::as_str) == Some("ACTIVE")
    }

    fn max_n(&self) -> Option<usize> {
        Some(crate::convergence::settings::peer_max_n())
    }

    fn version(&self, _ctx: &Ctx<'_>) -> Option<String> {
        Some(format!("kro {KRO_VERSION}"))
    }

    fn prepare<'a>(&'a self, ctx: &'a Ctx<'a>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let home = Self::home(ctx);
            ensure!(
                home.join("bin/controller").exists() && home.join("crds").is_dir(),
                "{}/bin/controller or crds/ missing: run bench/run.sh (make bench), which installs kro {KRO_VERSION}",
                home.display()
            );
            let crds = home.join("crds").display().to_string();
            crate::convergence::plane::kubectl(ctx.plane, &["apply", "--server-side", "-f", &crds]).await?;
            crate::convergence::plane::kubectl(
                ctx.plane,
                &["wait", "--for=condition=Established", "crd", "--all", "--timeout=60s"],
            )
            .await?;
            let rgd = ctx
                .settings
                .root
                .join("bench/kro/database-rgd.yaml")
                .display()
                .to_string();
            crate::convergence::plane::kubectl(ctx.plane, &["apply", "-f", &rgd]).await?;
            Ok(())
        })
    }

    fn launch(&self, ctx: &Ctx<'_>, _ns: &str, _setup: &Setup) -> Result<Launch> {
        let metrics = format!("127.0.0.1:{}", free_port()?);
        let probe = format!("127.0.0.1:{}", free_port()?);
        let mut command = Command::new(Self::home(ctx).join("bin/controller"));
        command
            .arg(format!("--metrics-bind-address={metrics}"))
            .arg(format!("--health-probe-bind-address={probe}"))
            // The level its Helm chart deploys with (the binary's own default logs at debug).
            .arg("--zap-log-level=info")
            .arg(format!(
                "--dynamic-controller-concurrent-reconciles={}",
                ctx.settings.floor_concurrency
            ));
        Ok(Launch {
            command,
            ready: (probe, "/readyz", false),
            reconciles: Reconciles::Metric {
                addr: metrics,
                name: "instance_reconcile_total",
                labels: &[],
            },
        })
    }

    /// kro makes the CRD of the resource graph definition once it runs; parents can be created
    /// when that CRD is established and the definition says Active.
    fn after_ready<'a>(&'a self, ctx: &'a Ctx<'a>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let crds: Api<CustomResourceDefinition> = Api::all(ctx.client.clone());
            let rgd_ar = ApiResource::from_gvk_with_plural(
                &GroupVersionKind::gvk("kro.run", "v1alpha1", "ResourceGraphDefinition"),
                "resourcegraphdefinitions",
            );
            let rgds: Api<DynamicObject> = Api::all_with(ctx.client.clone(), &rgd_ar);
            let crd_name = format!("{}.{}", KRO_DATABASE.plural, KRO_DATABASE.group);
            let start = Instant::now();
            loop {
                let established = crds.get_opt(&crd_name).await?.is_some_and(|crd| {
                    crd.status
                        .and_then(|s| s.conditions)
                        .into_iter()
                        .flatten()
                        .any(|c| c.type_ == "Established" && c.status == "True")
                });
                let rgd = rgds
                    .get_opt("databases.kro.myorg.io")
                    .await?
                    .context("the RGD is gone")?;
                let state = rgd.data.pointer("/status/state").and_then(Value::as_str).unwrap_or("");
                if established && state == "Active" {
                    return Ok(());
                }
                if start.elapsed() > Duration::from_secs(90) {
                    bail!(
                        "kro: CRD {crd_name} established {established}, RGD state {state:?} after 90s; RGD status: {}",
                        rgd.data.get("status").map(Value::to_string).unwrap_or_default()
                    );
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
    }
}
