//! The contenders: what each one is, how it is started and what "converged" means for it.
//!
//! Adding a contender is one new file here: a type implementing [`Contender`], and one line in
//! [`ALL`]. The harness (phases.rs) does the rest: namespace, parents, observer, write counts,
//! memory and CPU of the process, start-up, the report and the picture.

pub(crate) mod floor;
mod kopf;
mod kro;
mod ruleop;

use std::path::PathBuf;

use anyhow::{Result, bail};
use futures::future::BoxFuture;
use kube::api::DynamicObject;
use serde_json::Value;
use tokio::process::Command;
use tokio::sync::mpsc;

use crate::convergence::parents::{DATABASE, ParentKind};
use crate::convergence::phases::Ctx;

/// Every contender, in the order of the report's columns.
pub static ALL: [&dyn Contender; 6] = [
    &floor::FLOOR,
    &floor::FLOOR_EQUAL,
    &ruleop::RULEOP,
    &kopf::KOPF,
    &ruleop::RULEOP_CHILDREN,
    &kro::KRO,
];

/// The default `BENCH_CONTENDERS`.
pub const DEFAULT: &str = "floor,floor-equal,ruleop,kopf,ruleop-children,kro";

/// Looks a contender up by its name in `BENCH_CONTENDERS`.
pub fn by_name(name: &str) -> Option<&'static dyn Contender> {
    ALL.iter().copied().find(|c| c.name() == name)
}

/// The contender of the unrecorded warm-up round: the floor.
pub fn warm_up() -> &'static dyn Contender {
    &floor::FLOOR
}

/// A parent the harness created, handed to an in-harness contender: (name, uid, generation).
pub type Created = (String, String, i64);

/// How a contender runs.
pub enum Runner {
    /// A process the harness spawns for each phase ([`Contender::launch`]).
    Process,
    /// Work inside the harness on each parent the creator hands over ([`Contender::serve`]).
    InHarness,
}

/// What a phase asks of a process contender beyond its defaults (ruleop's resync and reload).
#[derive(Default)]
pub struct Setup {
    /// A rules directory instead of the contender's own.
    pub rules: Option<PathBuf>,
    /// A templates directory instead of `templates/`.
    pub templates: Option<PathBuf>,
    /// Watch every namespace, not only the phase's (the fairness phase).
    pub all_namespaces: bool,
}

/// How to start a process contender and how to ask it how far it is.
pub struct Launch {
    /// The command; the harness adds KUBECONFIG, the log file as stdout/stderr and kill-on-drop.
    pub command: Command,
    /// `http://<addr><path>` answers 200 (and a body starting with `ok` if `body_ok`) when ready.
    pub ready: (String, &'static str, bool),
    /// Where its count of completed reconciles comes from.
    pub reconciles: Reconciles,
}

/// A process contender's count of completed reconciles (start-up "all N reconciled", resync).
pub enum Reconciles {
    /// The sum of a Prometheus counter at `http://<addr>/metrics` over the series with these labels.
    Metric {
        addr: String,
        name: &'static str,
        labels: &'static [(&'static str, &'static str)],
    },
    /// One line per handler run in this file (the kopf peer writes it).
    Lines(PathBuf),
}

/// The extra phases a contender takes part in (they need features only ruleop has).
#[derive(Clone, Copy, Default)]
pub struct Extras {
    /// A full resync with a short `resync:` (0 writes expected).
    pub resync: bool,
    /// A template edit picked up without a restart.
    pub reload: bool,
    /// One parent in a quiet namespace while another namespace creates N.
    pub fairness: bool,
}

/// One contender of the benchmark.
pub trait Contender: Send + Sync {
    /// Its name: `BENCH_CONTENDERS`, the namespace `bench-<name>-<N>`, the report's column.
    fn name(&self) -> &'static str;

    /// One sentence for the report: what runs and with which settings.
    fn describe(&self) -> String;

    /// The parent kind it reconciles.
    fn parent(&self) -> &'static ParentKind {
        &DATABASE
    }

    /// Whether it runs the one-shot backup action (then the backup Job is part of "converged").
    fn runs_backup(&self) -> bool {
        true
    }

    /// Whether the parent's status says this contender has reconciled it.
    fn parent_done(&self, parent: &DynamicObject) -> bool {
        observed_generation_current(parent)
    }

    /// The largest N it runs at (above it, it is skipped and the report says so).
    fn max_n(&self) -> Option<usize> {
        None
    }

    /// The extra phases it takes part in.
    fn extras(&self) -> Extras {
        Extras::default()
    }

    /// Once per benchmark run, after the CRDs are installed: its own set-up (a venv, a binary, a
    /// resource graph definition). An error skips this contender for the whole run.
    fn prepare<'a>(&'a self, _ctx: &'a Ctx<'a>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// A version string for the report header, if it has one.
    fn version(&self, _ctx: &Ctx<'_>) -> Option<String> {
        None
    }

    /// How it runs.
    fn runner(&self) -> Runner {
        Runner::Process
    }

    /// The command line of a process contender watching namespace `ns`.
    fn launch(&self, _ctx: &Ctx<'_>, _ns: &str, _setup: &Setup) -> Result<Launch> {
        bail!("{} is not a process", self.name())
    }

    /// Once the process is ready (and before any parent exists): waits until it can take
    /// parents (kro: until it has made the CRD of its resource graph definition).
    fn after_ready<'a>(&'a self, _ctx: &'a Ctx<'a>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async { Ok(()) })
    }

    /// An in-harness contender: works on every parent received until the channel closes.
    fn serve<'a>(
        &'a self,
        _ctx: &'a Ctx<'a>,
        _ns: &'a str,
        _parents: mpsc::UnboundedReceiver<Created>,
    ) -> BoxFuture<'a, Result<()>> {
        let name = self.name();
        Box::pin(async move { bail!("{name} does not run in the harness") })
    }
}

/// `status.observedGeneration == metadata.generation`.
pub fn observed_generation_current(parent: &DynamicObject) -> bool {
    let generation = parent.metadata.generation;
    generation.is_some()
        && generation
            == parent
                .data
                .pointer("/status/observedGeneration")
                .and_then(Value::as_i64)
}

/// A free loopback port (bound and released; the contender binds it a moment later).
pub fn free_port() -> Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}
