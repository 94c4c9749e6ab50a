//! `ruleop rollout status|history|pause|resume|undo [RULE]`: staged rollouts and kept revisions
//! as the cluster holds them (the `rollout.<rule>` and `revisions` keys of `ruleop-status`, and
//! the revision ConfigMaps with a unified diff of each revision's changed files against the one
//! before), and the requests that ask the running operator to pause, resume or undo a rollout.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::Context as _;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::inspect::live::dry_run::unified;
use crate::offline::parent::rule_of_parent;
use crate::offline::render::render_with;
use crate::offline::{CommandError, RenderInputs, SchemaSources, Sources, load_checked};

use crate::engine::rollout::control::{self, Command, Request};
use crate::engine::rollout::record::Record;
use crate::engine::rules::RuleSet;
use crate::records::requests;
use crate::records::revisions::{kept_before, read_record, selector, set_of_record};
use crate::records::rollouts::{self, recorded};
use crate::records::status::{STATUS_CONFIGMAP, revisions_in_force};

/// What to show.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Show {
    /// Each rule's revision in force and its rollout's state.
    Status,
    /// Each rule's kept revisions with the diffs of their files.
    History,
    /// Ask the operator to pause, resume or undo, waiting this long for it to follow.
    Ask(Command, Duration),
}

/// `ruleop rollout status|history`; returns the exit code: 0, or 1 when `status` finds a halted
/// or rolled-back rollout, 2 on error.
pub(crate) fn command(show: Show, rule: Option<&str>, status_namespace: &str) -> u8 {
    let Some(runtime) = crate::inspect::live::runtime() else {
        return 2;
    };
    let result = runtime.block_on(async {
        let config = crate::apply::client::cluster_config()
            .await
            .context("cannot connect to the cluster (kubeconfig or in-cluster config)")?;
        let client = Client::try_from(config).context("cannot build a client for the cluster")?;
        let config_maps: Api<ConfigMap> = Api::namespaced(client, status_namespace);
        match show {
            Show::Status => status(&config_maps, rule, status_namespace).await,
            Show::History => history(&config_maps, rule).await.map(|text| (text, 0)),
            Show::Ask(command, wait) => ask(&config_maps, command, rule, status_namespace, wait).await,
        }
    });
    match result {
        Ok((text, code)) => {
            print!("{text}");
            code
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            2
        }
    }
}

async fn status(config_maps: &Api<ConfigMap>, rule: Option<&str>, namespace: &str) -> anyhow::Result<(String, u8)> {
    let data = config_maps
        .get_opt(STATUS_CONFIGMAP)
        .await
        .with_context(|| format!("reading {namespace}/{STATUS_CONFIGMAP}"))?
        .and_then(|cm| cm.data)
        .unwrap_or_default();
    let in_force: BTreeMap<&str, &str> = data
        .get("revisions")
        .map(|lines| lines.lines().filter_map(|l| l.split_once(": ")).collect())
        .unwrap_or_default();
    let mut text = String::new();
    let mut code = 0;
    let mut rules: Vec<&str> = in_force.keys().copied().collect();
    rules.extend(data.keys().filter_map(|k| k.strip_prefix("rollout.")));
    rules.sort_unstable();
    rules.dedup();
    for name in rules.into_iter().filter(|name| rule.is_none_or(|r| r == *name)) {
        text.push_str(&format!(
            "rule {name}: revision {}\n",
            in_force.get(name).copied().unwrap_or("unknown")
        ));
        match data.get(&format!("rollout.{name}")) {
            Some(state) => {
                let paused = state.contains("\nnote: paused");
                if (state.contains("phase: Halted") && !paused) || state.contains("phase: RolledBack") {
                    code = 1;
                }
                for line in state.lines() {
                    text.push_str(&format!("  {line}\n"));
                }
            }
            None => text.push_str("  no staged rollout\n"),
        }
    }
    if text.is_empty() {
        text = format!("no rule revisions recorded in {namespace}/{STATUS_CONFIGMAP}\n");
    }
    Ok((text, code))
}

/// Asks the operator to pause, resume or undo the rollout of `rule`: checked first against what
/// `ruleop-status` records (the same decision the operator makes), then written as the request
/// ConfigMap, then waited for until the operator has deleted it.
async fn ask(
    config_maps: &Api<ConfigMap>,
    command: Command,
    rule: Option<&str>,
    namespace: &str,
    wait: Duration,
) -> anyhow::Result<(String, u8)> {
    let data = config_maps
        .get_opt(STATUS_CONFIGMAP)
        .await
        .with_context(|| format!("reading {namespace}/{STATUS_CONFIGMAP}"))?
        .with_context(|| {
            format!(
                "{namespace}/{STATUS_CONFIGMAP} does not exist: is ruleop running with --status-namespace {namespace}?"
            )
        })?
        .data
        .unwrap_or_default();
    let in_force = revisions_in_force(&data);
    let recorded_of = |rule: &str| data.get(&rollouts::key(rule)).and_then(|text| recorded(text));
    let rule = match rule {
        Some(rule) => rule.to_owned(),
        None => {
            let under_way: Vec<&str> = in_force.keys().copied().filter(|r| recorded_of(r).is_some()).collect();
            match under_way.as_slice() {
                [one] => (*one).to_owned(),
                [] => anyhow::bail!(
                    "ruleop rollout {}: no rollout is in progress; name the rule",
                    command.as_str()
                ),
                many => anyhow::bail!(
                    "ruleop rollout {}: rollouts are in progress for {}; name the rule",
                    command.as_str(),
                    many.join(", ")
                ),
            }
        }
    };
    let Some(&revision) = in_force.get(rule.as_str()) else {
        let known: Vec<&str> = in_force.keys().copied().collect();
        anyhow::bail!(
            "ruleop rollout {} {rule}: rule {rule:?} is not in force ({namespace}/{STATUS_CONFIGMAP} names: {})",
            command.as_str(),
            if known.is_empty() {
                "none".to_owned()
            } else {
                known.join(", ")
            }
        );
    };
    let state = recorded_of(&rule).map(|r| r.state).filter(|s| s.to == revision);
    let previous = match (&state, command) {
        (Some(state), _) => Some(state.from),
        (None, Command::Undo) => kept_before(config_maps, &rule, revision)
            .await
            .context("listing the kept revisions")?,
        (None, _) => None,
    };
    let request = Request {
        command,
        revision,
        previous,
    };
    let refuse = |why: String| {
        anyhow::anyhow!(
            "ruleop rollout {} {rule}: {why}; see ruleop rollout status {rule}",
            command.as_str()
        )
    };
    if command == Command::Undo && previous.is_none() {
        return Err(refuse(control::Refused::NothingToUndo(revision).to_string()));
    }
    control::apply(state.as_ref(), revision, &request).map_err(|e| refuse(e.to_string()))?;
    let name = requests::write(config_maps, &rule, &request)
        .await
        .with_context(|| format!("writing the request {namespace}/{}", control::request_name(&rule)))?;
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if config_maps
            .get_opt(&name)
            .await
            .with_context(|| format!("reading {namespace}/{name}"))?
            .is_none()
        {
            break;
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok((
                format!(
                    "requested ({namespace}/{name}), but no operator followed it within {wait:?}: it stays and is followed when ruleop runs\n"
                ),
                1,
            ));
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    // Every followed request writes a note with its time, so an unchanged state means refused.
    let key = rollouts::key(&rule);
    let after = config_maps
        .get_opt(STATUS_CONFIGMAP)
        .await
        .with_context(|| format!("reading {namespace}/{STATUS_CONFIGMAP}"))?
        .and_then(|cm| cm.data)
        .and_then(|mut data| data.remove(&key));
    if after.as_ref() == data.get(&key) {
        return Err(refuse(format!(
            "the operator refused the request (its reason is the Warning Event RolloutRequestRefused on {namespace}/{STATUS_CONFIGMAP})"
        )));
    }
    let (text, _) = status(config_maps, Some(&rule), namespace).await?;
    Ok((text, 0))
}

/// `ruleop render --revision N`: the parent rendered under kept revision `revision` of the rule
/// the files give its kind, read from the cluster.
pub(crate) fn render_revision(
    sources: &Sources,
    schemas: &SchemaSources,
    inputs: &RenderInputs<'_>,
    revision: u64,
    status_namespace: &str,
) -> Result<String, CommandError> {
    let (files, _) = load_checked(sources, schemas)?;
    let rule = rule_of_parent(&files, inputs.file)?;
    let runtime =
        crate::inspect::live::runtime().ok_or_else(|| CommandError("cannot start the async runtime".to_owned()))?;
    let kept = runtime
        .block_on(kept_set(&rule, revision, status_namespace))
        .map_err(|e| CommandError(format!("error: {e:#}")))?;
    let set = RuleSet {
        schemas: files.schemas,
        ..kept
    };
    render_with(&set, inputs)
}

/// The rule set of kept revision `revision` of `rule`, read from the cluster of the kubeconfig.
pub(crate) async fn kept_set(rule: &str, revision: u64, status_namespace: &str) -> anyhow::Result<RuleSet> {
    let config = crate::apply::client::cluster_config()
        .await
        .context("cannot connect to the cluster (kubeconfig or in-cluster config)")?;
    let client = Client::try_from(config).context("cannot build a client for the cluster")?;
    let config_maps: Api<ConfigMap> = Api::namespaced(client, status_namespace);
    let record = read_record(&config_maps, rule, revision).await.map_err(|e| {
        anyhow::anyhow!(
            "revision {revision} of rule {rule:?} is not kept in {status_namespace} ({e}); `ruleop rollout history {rule}` lists the kept ones"
        )
    })?;
    set_of_record(&record).map_err(|e| anyhow::anyhow!("revision {revision} of rule {rule:?} does not load: {e}"))
}

async fn history(config_maps: &Api<ConfigMap>, rule: Option<&str>) -> anyhow::Result<String> {
    let listed = config_maps
        .list(&ListParams::default().labels(&selector(rule)))
        .await
        .context("listing the kept revisions")?;
    let mut records: BTreeMap<String, BTreeMap<u64, Record>> = BTreeMap::new();
    let mut text = String::new();
    for config_map in listed {
        let name = config_map.metadata.name.clone().unwrap_or_default();
        match Record::from_data(&config_map.data.unwrap_or_default()) {
            Ok(record) => {
                records
                    .entry(record.rule.clone())
                    .or_default()
                    .insert(record.revision.number, record);
            }
            Err(e) => text.push_str(&format!("{name}: {e}\n")),
        }
    }
    for (name, revisions) in &records {
        text.push_str(&format!("rule {name}\n"));
        let mut before: Option<&Record> = None;
        for (number, record) in revisions {
            text.push_str(&format!(
                "  revision {number}  {}  digest {}  changed: {}\n",
                record.revision.created,
                &record.revision.digest[..record.revision.digest.len().min(16)],
                record.revision.changed.join(", ")
            ));
            if let Some(before) = before {
                for file in &record.revision.changed {
                    let old = before.contents.get(file).map_or("", String::as_str);
                    let new = record.contents.get(file).map_or("", String::as_str);
                    let diff = unified(
                        old,
                        new,
                        &format!("{file} (revision {})", before.revision.number),
                        &format!("{file} (revision {number})"),
                    );
                    for line in diff.lines() {
                        text.push_str(&format!("    {line}\n"));
                    }
                }
            }
            before = Some(record);
        }
    }
    if records.is_empty() && text.is_empty() {
        text.push_str("no kept revisions\n");
    }
    Ok(text)
}
