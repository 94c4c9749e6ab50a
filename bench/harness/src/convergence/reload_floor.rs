//! The reload's floor: the writes a reload must send, timed from inside the harness.
//!
//! Over the N converged parents ruleop's reload phase left, the harness server-side applies
//! each parent's Service as `ruleop render` produces it with one label changed, the request
//! ruleop sends for a template edit (same field manager, `force`, strict field validation), as
//! many at once as the rule's reload runs (`RuleSpec::reload_in_flight`: 20 for the shipped
//! rule). No debounce, no watching, no planning, no Events: what the API server alone takes to
//! serve the reload's applies.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, ensure};
use futures::{TryStreamExt, stream};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;

use crate::convergence::contenders::floor::FloorTemplates;
use crate::convergence::parents::DATABASE;
use crate::convergence::phases::Ctx;
use crate::convergence::process::{CpuWindow, WindowCpu};

/// The shipped rule whose Services the floor applies.
const RULE: &str = "database";

/// Applies every parent's Service with the label `reload: floor` and returns how long the N
/// applies took, and the control plane's CPU over them.
pub async fn reload_floor(ctx: &Ctx<'_>, ns: &str, n: usize) -> Result<(Duration, WindowCpu)> {
    let templates = FloorTemplates::render(ctx, &ctx.client, ns).await?;
    let service = templates
        .children
        .iter()
        .find(|c| c.resource.kind == "Service")
        .context("render output has no Service")?;
    let databases: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &DATABASE.resource());
    let parents: Vec<(String, String)> = databases
        .list_metadata(&Default::default())
        .await?
        .items
        .into_iter()
        .filter_map(|p| Some((p.metadata.name?, p.metadata.uid?)))
        .collect();
    ensure!(parents.len() == n, "{} parents in {ns}, expected {n}", parents.len());
    let services: Api<DynamicObject> = Api::namespaced_with(ctx.client.clone(), ns, &service.resource);
    // ruleop's field manager (the floor's applies replace what ruleop's own applies own), and as
    // many at once as the rule's reload runs.
    let params = PatchParams::apply(ruleop::FIELD_MANAGER).force().validation_strict();
    let in_flight = usize::from(reload_in_flight(ctx)?);
    let window = CpuWindow::start(ctx.plane, None);
    let start = Instant::now();
    stream::iter(parents.iter().map(Ok))
        .try_for_each_concurrent(in_flight, |(name, uid)| {
            let (services, params) = (&services, &params);
            async move {
                let mut object = FloorTemplates::instantiate(&service.object, name, uid)?;
                object["metadata"]["labels"]["reload"] = json!("floor");
                let service_name = FloorTemplates::named(&service.name, name, uid);
                services.patch(&service_name, params, &Patch::Apply(&object)).await?;
                anyhow::Ok(())
            }
        })
        .await?;
    Ok((start.elapsed(), window.stop()))
}

/// Reconciles the shipped rule's reload runs at once (its `reloadConcurrency`, or the default).
fn reload_in_flight(ctx: &Ctx<'_>) -> Result<u16> {
    let root = &ctx.settings.root;
    let rules = ruleop::engine::rules::load::load(&root.join("rules"), &root.join("templates"))
        .map_err(|e| anyhow!("loading the shipped rules: {e}"))?;
    let rule = rules
        .rule(RULE)
        .with_context(|| format!("no rule {RULE:?} in rules/"))?;
    Ok(rule.spec.reload_in_flight())
}
