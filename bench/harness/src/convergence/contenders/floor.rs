//! The floor: the bare writes any Database operator must send, from inside the harness.
//!
//! For each created parent (handed over by the creator: no watch, no planning) it server-side
//! applies every child that `ruleop render -o json` produces (rendered once for a placeholder
//! parent, name and uid substituted: the Service, the StatefulSet and the backups volume of the
//! shipped rule), creates the backup Job and writes status once: 5 writes per parent, as many
//! parents at once as ruleop reconciles. The equal floor (`floor-equal`) first adds the finalizer
//! the shipped rule's final backup needs (a merge patch of the parent, as ruleop sends): 6 writes,
//! the same behaviour as the shipped rule, so its ratio compares equal work.

use anyhow::{Context, Result, ensure};
use futures::future::BoxFuture;
use futures::{StreamExt, TryStreamExt, stream};
use k8s_openapi::api::batch::v1::Job;
use kube::Client;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tokio::process::Command;
use tokio::sync::mpsc;

use super::{Contender, Created, Runner};
use crate::convergence::parents::DATABASE;
use crate::convergence::phases::Ctx;

/// Placeholders for the floor's rendered objects.
const PLACEHOLDER_NAME: &str = "bnchparentplaceholder";
const PLACEHOLDER_UID: &str = "00000000-0000-4000-8000-0000b3c4a11d";

/// A floor contender.
pub struct Floor {
    /// Also add the final-backup finalizer to each parent (the equal floor).
    finalizer: bool,
}

/// The bare floor: 5 writes per parent.
pub static FLOOR: Floor = Floor { finalizer: false };

/// The equal floor: the bare one plus the finalizer, 6 writes per parent.
pub static FLOOR_EQUAL: Floor = Floor { finalizer: true };

/// The finalizer ruleop adds to a parent whose rule has an on-delete action (the final backup).
const FINALIZER: &str = ruleop::engine::plan::CLEANUP_FINALIZER;

impl Contender for Floor {
    fn name(&self) -> &'static str {
        if self.finalizer { "floor-equal" } else { "floor" }
    }

    fn describe(&self) -> String {
        let (first, writes) = if self.finalizer {
            (
                format!("adds the `{FINALIZER}` finalizer (a merge patch, as ruleop's final backup needs), "),
                6,
            )
        } else {
            (String::new(), 5)
        };
        format!(
            "in the harness, a kube client that for each created parent {first}applies the Service, \
             StatefulSet and backups PersistentVolumeClaim `ruleop render` produces, creates the backup Job \
             and writes status once ({writes} writes), `BENCH_FLOOR_CONCURRENCY` parents at a time; no \
             process, so no RSS or CPU figure"
        )
    }

    fn runner(&self) -> Runner {
        Runner::InHarness
    }

    fn serve<'a>(
        &'a self,
        ctx: &'a Ctx<'a>,
        ns: &'a str,
        parents: mpsc::UnboundedReceiver<Created>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let client = Client::try_from(ctx.config.clone())?;
            let templates = FloorTemplates::render(ctx, &client, ns).await?;
            run_floor(
                client,
                ns,
                &templates,
                parents,
                ctx.settings.floor_concurrency,
                self.finalizer,
            )
            .await
        })
    }
}

/// The objects `ruleop render` produces for a placeholder parent, as JSON text.
pub(crate) struct FloorTemplates {
    pub(crate) children: Vec<RenderedChild>,
    job: String,
    status: String,
}

/// One child of the rendered plan: its kind's resource, its name and itself, as JSON text.
pub(crate) struct RenderedChild {
    pub(crate) resource: ApiResource,
    pub(crate) name: String,
    pub(crate) object: String,
}

impl FloorTemplates {
    pub(crate) async fn render(ctx: &Ctx<'_>, client: &Client, ns: &str) -> Result<Self> {
        let settings = ctx.settings;
        let parent = settings.state.join(format!("floor-parent-{ns}.yaml"));
        let mut db = DATABASE.object(PLACEHOLDER_NAME);
        db["metadata"]["namespace"] = json!(ns);
        db["metadata"]["uid"] = json!(PLACEHOLDER_UID);
        db["metadata"]["generation"] = json!(1);
        std::fs::write(&parent, serde_json::to_string(&db)?)?;
        let out = Command::new(&settings.ruleop_bin)
            .args([
                "render",
                "-o",
                "json",
                "--rules",
                "rules",
                "--templates",
                "templates",
                "-f",
            ])
            .arg(&parent)
            .current_dir(&settings.root)
            .output()
            .await?;
        ensure!(
            out.status.success(),
            "ruleop render: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout)?;
        let mut children = Vec::new();
        for child in v
            .pointer("/plan/children")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            let object = &child["object"];
            let (api_version, kind) = (object["apiVersion"].as_str(), object["kind"].as_str());
            let (Some(api_version), Some(kind)) = (api_version, kind) else {
                anyhow::bail!("render output has a child without apiVersion or kind: {child}");
            };
            let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
            let (resource, _) = kube::discovery::pinned_kind(client, &GroupVersionKind::gvk(group, version, kind))
                .await
                .with_context(|| format!("discovery of {api_version} {kind}"))?;
            children.push(RenderedChild {
                resource,
                name: object["metadata"]["name"]
                    .as_str()
                    .context("a child without a name")?
                    .to_owned(),
                object: object.to_string(),
            });
        }
        ensure!(!children.is_empty(), "render output has no children");
        let actions = v.pointer("/plan/actions").and_then(Value::as_array);
        let job = actions
            .into_iter()
            .flatten()
            .find(|a| a["id"] == "backup")
            .and_then(|a| a.pointer("/effect/create"))
            .context("render output has no backup Job")?;
        let mut status = v
            .pointer("/plan/statusPatch")
            .context("render output has no statusPatch")?
            .clone();
        if let Some(conditions) = status.pointer_mut("/status/conditions").and_then(Value::as_array_mut) {
            conditions.push(
                json!({"type": "BackupInitiated", "status": "True", "reason": "AsExpected",
                "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": 1}),
            );
        }
        Ok(FloorTemplates {
            children,
            job: job.to_string(),
            status: status.to_string(),
        })
    }

    pub(crate) fn instantiate(text: &str, name: &str, uid: &str) -> Result<Value> {
        Ok(serde_json::from_str(&Self::named(text, name, uid))?)
    }

    pub(crate) fn named(text: &str, name: &str, uid: &str) -> String {
        text.replace(PLACEHOLDER_NAME, name).replace(PLACEHOLDER_UID, uid)
    }
}

/// For each created parent: the finalizer (with `finalizer`), server-side apply of each of its
/// children, create the backup Job, one status write. `concurrency` parents at a time.
async fn run_floor(
    client: Client,
    ns: &str,
    templates: &FloorTemplates,
    rx: mpsc::UnboundedReceiver<Created>,
    concurrency: usize,
    finalizer: bool,
) -> Result<()> {
    let children: Vec<(Api<DynamicObject>, &RenderedChild)> = templates
        .children
        .iter()
        .map(|child| (Api::namespaced_with(client.clone(), ns, &child.resource), child))
        .collect();
    let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
    let databases: Api<DynamicObject> = Api::namespaced_with(client, ns, &DATABASE.resource());
    let apply = PatchParams::apply("ruleop-floor").force();
    let parents = stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|p| (p, rx)) });
    parents
        .map(Ok)
        .try_for_each_concurrent(concurrency.max(1), |(name, uid, generation)| {
            let (children, jobs, databases, apply) = (&children, &jobs, &databases, &apply);
            async move {
                if finalizer {
                    let add = json!({"metadata": {"finalizers": [FINALIZER]}});
                    databases
                        .patch(&name, &PatchParams::default(), &Patch::Merge(&add))
                        .await?;
                }
                for (api, child) in children {
                    let object = FloorTemplates::instantiate(&child.object, &name, &uid)?;
                    let child_name = FloorTemplates::named(&child.name, &name, &uid);
                    api.patch(&child_name, apply, &Patch::Apply(&object)).await?;
                }
                let job: Job = serde_json::from_value(FloorTemplates::instantiate(&templates.job, &name, &uid)?)?;
                jobs.create(&PostParams::default(), &job).await?;
                let mut status = FloorTemplates::instantiate(&templates.status, &name, &uid)?;
                status["status"]["observedGeneration"] = json!(generation);
                databases
                    .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
                    .await?;
                anyhow::Ok(())
            }
        })
        .await
}
