//! The soak's environment: its size, its seed and how often each fault comes (seconds, `LO-HI`).

use std::time::Duration;

/// A range of seconds a delay is drawn from (both ends included).
#[derive(Clone, Copy, Debug)]
pub struct Span {
    pub lo: u64,
    pub hi: u64,
}

impl std::fmt::Display for Span {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.lo == self.hi {
            write!(f, "{} s", self.lo)
        } else {
            write!(f, "{}-{} s", self.lo, self.hi)
        }
    }
}

/// Everything a run is told; see bench/README.md ("The soak") for each variable.
pub struct Settings {
    /// How long faults are injected (`SOAK_MINUTES`, default 60).
    pub minutes: f64,
    /// Databases with backups (`SOAK_PARENTS`, default 1000).
    pub parents: usize,
    /// The seed that replays a run (`SOAK_SEED`, else `RULEOP_TEST_SEED`, else the clock).
    pub seed: Option<u64>,
    /// A random replica is SIGKILLed (and started again) every `kill_every`.
    pub kill_every: Span,
    /// The API server is stopped every `apiserver_every`, down for `apiserver_down`.
    pub apiserver_every: Span,
    pub apiserver_down: Span,
    /// A spec-edit or annotation storm on random parents every `storm_every`.
    pub storm_every: Span,
    /// The Service template the replicas read is edited every `reload_every`.
    pub reload_every: Span,
    /// Replica 0's connection to the API server stalls every `stall_every`, for `stall_for`.
    pub stall_every: Span,
    pub stall_for: Span,
    /// etcd is compacted to its current revision every `compact_every`.
    pub compact_every: Span,
    /// How often parents, Jobs and RSS are sampled while faults run.
    pub sample_every: Duration,
    /// The bound on convergence after the last fault (the 30 s).
    pub converge_within: Duration,
    /// How long to wait for convergence after the last fault before giving up (`SOAK_SETTLE_S`).
    pub settle: Duration,
    /// Where the result goes (`SOAK_OUT`, default bench/results).
    pub out: std::path::PathBuf,
}

fn number<T: std::str::FromStr>(var: &dyn Fn(&str) -> Option<String>, name: &str, default: T) -> T {
    match var(name) {
        Some(text) if !text.trim().is_empty() => text
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?} is not a number")),
        _ => default,
    }
}

fn span(var: &dyn Fn(&str) -> Option<String>, name: &str, lo: u64, hi: u64) -> Span {
    let Some(text) = var(name) else {
        return Span { lo, hi };
    };
    let parse = |part: &str| -> u64 {
        part.trim()
            .parse()
            .unwrap_or_else(|_| panic!("{name}={text:?}: expected seconds as LO-HI or N"))
    };
    let span = match text.split_once('-') {
        Some((lo, hi)) => Span {
            lo: parse(lo),
            hi: parse(hi),
        },
        None => Span {
            lo: parse(&text),
            hi: parse(&text),
        },
    };
    assert!(
        span.lo >= 1 && span.lo <= span.hi,
        "{name}={text:?}: need 1 <= LO <= HI"
    );
    span
}

impl Settings {
    /// The settings from the environment, with the intervals as defaults.
    pub fn from_env() -> Self {
        Self::read(|name| std::env::var(name).ok())
    }

    /// The defaults: the run.
    pub fn defaults() -> Self {
        Self::read(|_| None)
    }

    fn read(var: impl Fn(&str) -> Option<String>) -> Self {
        let seed = ["SOAK_SEED", "RULEOP_TEST_SEED"]
            .iter()
            .find_map(|name| var(name).filter(|s| !s.is_empty()))
            .map(|s| s.parse().unwrap_or_else(|_| panic!("the seed {s:?} is not a number")));
        Settings {
            minutes: number(&var, "SOAK_MINUTES", 60.0),
            parents: number(&var, "SOAK_PARENTS", 1000),
            seed,
            kill_every: span(&var, "SOAK_KILL_EVERY", 30, 120),
            apiserver_every: span(&var, "SOAK_APISERVER_EVERY", 300, 600),
            apiserver_down: span(&var, "SOAK_APISERVER_DOWN", 2, 10),
            storm_every: span(&var, "SOAK_STORM_EVERY", 20, 60),
            reload_every: span(&var, "SOAK_RELOAD_EVERY", 600, 600),
            stall_every: span(&var, "SOAK_STALL_EVERY", 120, 300),
            stall_for: span(&var, "SOAK_STALL_FOR", 5, 30),
            compact_every: span(&var, "SOAK_COMPACT_EVERY", 120, 300),
            sample_every: Duration::from_secs(number(&var, "SOAK_SAMPLE_S", 10)),
            converge_within: Duration::from_secs(30),
            settle: Duration::from_secs(number(&var, "SOAK_SETTLE_S", 300)),
            out: var("SOAK_OUT").map_or_else(|| "bench/results".into(), Into::into),
        }
    }

    /// How long faults are injected.
    pub fn duration(&self) -> Duration {
        Duration::from_secs_f64(self.minutes * 60.0)
    }

    /// The settings as `NAME=value` lines for the report (what replays the run).
    pub fn describe(&self) -> Vec<(String, String)> {
        vec![
            ("SOAK_MINUTES".into(), self.minutes.to_string()),
            ("SOAK_PARENTS".into(), self.parents.to_string()),
            ("SOAK_KILL_EVERY".into(), self.kill_every.to_string()),
            ("SOAK_APISERVER_EVERY".into(), self.apiserver_every.to_string()),
            ("SOAK_APISERVER_DOWN".into(), self.apiserver_down.to_string()),
            ("SOAK_STORM_EVERY".into(), self.storm_every.to_string()),
            ("SOAK_RELOAD_EVERY".into(), self.reload_every.to_string()),
            ("SOAK_STALL_EVERY".into(), self.stall_every.to_string()),
            ("SOAK_STALL_FOR".into(), self.stall_for.to_string()),
            ("SOAK_COMPACT_EVERY".into(), self.compact_every.to_string()),
            ("SOAK_SAMPLE_S".into(), self.sample_every.as_secs().to_string()),
            ("SOAK_SETTLE_S".into(), self.settle.as_secs().to_string()),
        ]
    }
}
