//! The faults of one run, drawn up front from the seed: the same seed gives the same faults at
//! the same times on the same parents and replicas.

use std::time::Duration;

use crate::soak::settings::{Settings, Span};
use ruleop_testkit::RandomTimings;

/// The replicas of the soak (the 3, with `--shards 12`).
pub const REPLICAS: usize = 3;

/// One fault to inject.
#[derive(Clone, Debug)]
pub enum Fault {
    /// SIGKILL of one replica, started again at once.
    Kill { replica: usize },
    /// The API server stopped (SIGTERM), started again on the same data after `down`.
    ApiServerRestart { down: Duration },
    /// New generations: each parent's `spec.version` edited `edits` times in a row.
    SpecStorm { parents: Vec<usize>, edits: u32 },
    /// Backup requests: each parent's `myorg.io/backup-request` set to a new value `edits` times.
    AnnotationStorm { parents: Vec<usize>, edits: u32 },
    /// The Service template the replicas read edited (written aside, renamed over).
    Reload,
    /// Replica 0's proxy to the API server paused for `stall`.
    Stall { stall: Duration },
    /// etcd compacted to its current revision.
    Compaction,
}

/// The fault kinds in the report's order, with their names.
pub const KINDS: [&str; 7] = [
    "replica SIGKILL",
    "API server restart",
    "spec-edit storm",
    "annotation storm",
    "rule reload",
    "network stall",
    "etcd compaction",
];

impl Fault {
    /// Its kind, one of [`KINDS`].
    pub fn kind(&self) -> &'static str {
        match self {
            Fault::Kill { .. } => KINDS[0],
            Fault::ApiServerRestart { .. } => KINDS[1],
            Fault::SpecStorm { .. } => KINDS[2],
            Fault::AnnotationStorm { .. } => KINDS[3],
            Fault::Reload => KINDS[4],
            Fault::Stall { .. } => KINDS[5],
            Fault::Compaction => KINDS[6],
        }
    }
}

/// A fault and when it is due, from the start of the fault window.
#[derive(Clone, Debug)]
pub struct Planned {
    pub at: Duration,
    pub fault: Fault,
}

fn between(rng: &mut RandomTimings, span: Span) -> u64 {
    span.lo + rng.below(span.hi - span.lo + 1)
}

/// Every fault of the window, by time. Each kind is drawn in turn from the one sequence, so the
/// schedule depends on the seed and the settings only.
pub fn plan(settings: &Settings, rng: &mut RandomTimings) -> Vec<Planned> {
    let window = settings.duration();
    let n = settings.parents as u64;
    let mut planned = Vec::new();
    let mut every = |rng: &mut RandomTimings, span: Span, make: &mut dyn FnMut(&mut RandomTimings) -> Fault| {
        let mut at = Duration::from_secs(between(rng, span));
        while at < window {
            planned.push(Planned { at, fault: make(rng) });
            at += Duration::from_secs(between(rng, span));
        }
    };
    every(rng, settings.kill_every, &mut |rng| Fault::Kill {
        replica: rng.below(REPLICAS as u64) as usize,
    });
    let down = settings.apiserver_down;
    every(rng, settings.apiserver_every, &mut |rng| Fault::ApiServerRestart {
        down: Duration::from_secs(between(rng, down)),
    });
    every(rng, settings.storm_every, &mut |rng| {
        // 1 % to 5 % of the parents, each edited 1 to 3 times in a row.
        let count = between(
            rng,
            Span {
                lo: (n / 100).max(1),
                hi: (n / 20).max(1),
            },
        );
        let mut parents: Vec<usize> = (0..count).map(|_| rng.below(n) as usize).collect();
        parents.sort_unstable();
        parents.dedup();
        let edits = between(rng, Span { lo: 1, hi: 3 }) as u32;
        if rng.below(2) == 0 {
            Fault::SpecStorm { parents, edits }
        } else {
            Fault::AnnotationStorm { parents, edits }
        }
    });
    every(rng, settings.reload_every, &mut |_| Fault::Reload);
    let stall = settings.stall_for;
    every(rng, settings.stall_every, &mut |rng| Fault::Stall {
        stall: Duration::from_secs(between(rng, stall)),
    });
    every(rng, settings.compact_every, &mut |_| Fault::Compaction);
    planned.sort_by_key(|p| p.at);
    planned
}
