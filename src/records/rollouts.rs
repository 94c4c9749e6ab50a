//! The state of each staged rollout in `ruleop-status` (key `rollout.<rule>`), where users
//! already look after an edit: its text (one `key: value` per line, [`encode`] and [`decode`]),
//! written under a field manager of its own, so the reload report's writes and these leave each
//! other's keys alone, and watched by the replicas that follow the one running the rollouts.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::ConfigMap;
use kube::Client;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::watcher;
use tracing::warn;

use crate::engine::rollout::select::{Phase, RolloutState};
use crate::records::feed::ConfigMapFeed;
use crate::records::status::STATUS_CONFIGMAP;

/// The prefix of a rollout's key in `ruleop-status`; the rule's name follows.
const KEY_PREFIX: &str = "rollout.";

/// The key of `rule`'s rollout.
pub(crate) fn key(rule: &str) -> String {
    format!("{KEY_PREFIX}{rule}")
}

/// The field manager of the `rollout.<rule>` keys.
const MANAGER: &str = "ruleop-rollouts";

/// The rollouts' part of `ruleop-status`.
pub(crate) struct RolloutReport {
    api: Api<ConfigMap>,
    /// Rule -> what its key says. Every write sends them all: a key this manager stops sending
    /// would be removed by server-side apply.
    said: BTreeMap<String, String>,
}

impl RolloutReport {
    /// Writes into `ruleop-status` in `namespace`.
    pub(crate) fn new(client: Client, namespace: &str) -> Self {
        RolloutReport {
            api: Api::namespaced(client, namespace),
            said: BTreeMap::new(),
        }
    }

    /// The states recorded before this process (rule -> text), which later writes keep sending.
    pub(crate) async fn read_back(&mut self) -> BTreeMap<String, String> {
        match self.api.get_opt(STATUS_CONFIGMAP).await {
            Ok(existing) => {
                let data = existing.and_then(|cm| cm.data).unwrap_or_default();
                self.said = states(data);
                self.said.clone()
            }
            Err(e) => {
                warn!(error = %e, "cannot read the rollouts' state back from {STATUS_CONFIGMAP}");
                BTreeMap::new()
            }
        }
    }

    /// What another replica recorded (`states`, from a watch), which this one's writes then
    /// keep sending when it takes over the rollouts.
    pub(crate) fn heard(&mut self, states: BTreeMap<String, String>) {
        self.said = states;
    }

    /// The recorded state of `rule`'s rollout, as last written or heard.
    pub(crate) fn on_record(&self, rule: &str) -> Option<&String> {
        self.said.get(rule)
    }

    /// Records `text` as the state of `rule`'s rollout. Returns whether it is on record; a
    /// failure is logged, and the next write of any rule sends it again.
    pub(crate) async fn write(&mut self, rule: &str, text: String) -> bool {
        if self.said.get(rule) == Some(&text) {
            return true;
        }
        let mut said = self.said.clone();
        said.insert(rule.to_owned(), text);
        let data: BTreeMap<String, &String> = said.iter().map(|(rule, text)| (key(rule), text)).collect();
        let object = serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": STATUS_CONFIGMAP},
            "data": data,
        });
        let params = PatchParams::apply(MANAGER).force();
        match self.api.patch(STATUS_CONFIGMAP, &params, &Patch::Apply(&object)).await {
            Ok(_) => {
                self.said = said;
                true
            }
            Err(e) => {
                warn!(rule, error = %e, "writing the rollout state into {STATUS_CONFIGMAP} failed");
                false
            }
        }
    }
}

/// The recorded rollouts' states (`rollout.<rule>` of `ruleop-status`), each time the ConfigMap
/// changes; the watch ends when dropped.
pub(crate) struct Records(ConfigMapFeed<BTreeMap<String, String>>);

impl Records {
    /// Watches `ruleop-status` in `namespace`.
    pub(crate) fn watch(client: Client, namespace: &str) -> Self {
        let config = watcher::Config::default().fields(&format!("metadata.name={STATUS_CONFIGMAP}"));
        Records(ConfigMapFeed::start(
            Api::namespaced(client, namespace),
            config,
            "the recorded rollouts",
            |status| states(status.data.unwrap_or_default()),
        ))
    }

    /// The recorded states after the next change.
    pub(crate) async fn next(&mut self) -> Option<BTreeMap<String, String>> {
        self.0.next().await
    }
}

/// The rollouts' states among `ruleop-status`'s keys: rule -> text.
pub(crate) fn states(data: BTreeMap<String, String>) -> BTreeMap<String, String> {
    data.into_iter()
        .filter_map(|(key, text)| key.strip_prefix(KEY_PREFIX).map(|rule| (rule.to_owned(), text)))
        .collect()
}

/// A rollout as `ruleop-status` records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Recorded {
    /// Where it stands.
    pub(crate) state: RolloutState,
    /// When its current step began.
    pub(crate) started_at: jiff::Timestamp,
    /// What an operator asked of it last.
    pub(crate) note: Option<String>,
    /// The moved parents that failed: `namespace/name` -> why.
    pub(crate) failed: BTreeMap<String, String>,
}

/// The text of `recorded`, a rollout of `steps` steps whose current one moves `percent` of the
/// parents: one `key: value` per line, what [`decode`] reads back.
pub(crate) fn encode(recorded: &Recorded, steps: usize, percent: u8) -> String {
    let state = &recorded.state;
    let phase = crate::engine::rollout::control::phase_name(state.phase);
    let mut text = format!(
        "from: {}\nto: {}\nstep: {} of {steps} ({percent}%)\nphase: {phase}\nstepStartedAt: {}\n",
        state.from,
        state.to,
        state.step + 1,
        recorded.started_at
    );
    if let Some(note) = &recorded.note {
        text.push_str(&format!("note: {note}\n"));
    }
    if !recorded.failed.is_empty() {
        text.push_str("failed:\n");
        for (who, why) in &recorded.failed {
            text.push_str(&format!("  {who}: {why}\n"));
        }
    }
    text
}

/// What a recorded text says of a rollout under way; `None` when it is not such a text, or says
/// the rollout is over.
pub(crate) fn recorded(text: &str) -> Option<Recorded> {
    decode(text).filter(|r| r.state.phase != Phase::Complete)
}

/// What a recorded text ([`encode`]) says, a complete rollout included; `None` when it is not
/// such a text.
pub(crate) fn decode(text: &str) -> Option<Recorded> {
    let field = |key: &str| {
        text.lines()
            .find_map(|line| line.strip_prefix(key)?.strip_prefix(": "))
            .map(str::trim)
    };
    let phase = match field("phase")? {
        "Progressing" => Phase::Progressing,
        "Halted" => Phase::Halted,
        "RolledBack" => Phase::RolledBack,
        "Complete" => Phase::Complete,
        _ => return None,
    };
    let state = RolloutState {
        from: field("from")?.parse().ok()?,
        to: field("to")?.parse().ok()?,
        step: field("step")?
            .split_whitespace()
            .next()?
            .parse::<usize>()
            .ok()?
            .checked_sub(1)?,
        phase,
    };
    let failed = text
        .lines()
        .skip_while(|line| *line != "failed:")
        .skip(1)
        .map_while(|line| line.strip_prefix("  ")?.split_once(": "))
        .map(|(who, why)| (who.to_owned(), why.to_owned()))
        .collect();
    Some(Recorded {
        state,
        started_at: field("stepStartedAt")?.parse().ok()?,
        note: field("note").map(str::to_owned),
        failed,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn halted() -> Recorded {
        Recorded {
            state: RolloutState {
                from: 1,
                to: 2,
                step: 1,
                phase: Phase::Halted,
            },
            started_at: "2026-01-01T00:00:00Z".parse().expect("time"),
            note: Some("paused by ruleop rollout pause".to_owned()),
            failed: BTreeMap::from([("ns/a".to_owned(), "Ready False: R: m".to_owned())]),
        }
    }

    #[test]
    fn a_recorded_state_decodes_back_to_itself() {
        let text = encode(&halted(), 2, 100);
        assert!(
            text.starts_with("from: 1\nto: 2\nstep: 2 of 2 (100%)\nphase: Halted\n"),
            "{text}"
        );
        assert_eq!(recorded(&text), Some(halted()));
    }

    #[test]
    fn a_complete_rollout_decodes_but_is_not_under_way_and_garbage_decodes_to_nothing() {
        let complete = Recorded {
            state: RolloutState {
                phase: Phase::Complete,
                ..halted().state
            },
            ..halted()
        };
        let text = encode(&complete, 2, 100);
        assert!(recorded(&text).is_none());
        assert_eq!(decode(&text).map(|r| r.state.phase), Some(Phase::Complete));
        for garbage in [
            "",
            "from: x",
            "from: 1\nto: 2\nstep: 0 of 2\nphase: Halted\nstepStartedAt: 2026-01-01T00:00:00Z",
            "from: 1\nto: 2\nstep: 1 of 2\nphase: Halted\nstepStartedAt: yesterday",
        ] {
            assert!(decode(garbage).is_none(), "{garbage:?}");
        }
    }

    #[test]
    fn the_rollout_keys_are_picked_out_of_the_status_data() {
        let data = BTreeMap::from([
            ("state".to_owned(), "Loaded".to_owned()),
            (key("db"), "phase: Halted".to_owned()),
        ]);
        assert_eq!(
            states(data),
            BTreeMap::from([("db".to_owned(), "phase: Halted".to_owned())])
        );
    }
}
