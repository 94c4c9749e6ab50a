//! The kopf peer: bench/kopf/database_operator.py, the Database behaviour written the usual kopf
//! way, in the venv bench/run.sh installs from bench/kopf/requirements.txt.

use anyhow::{Result, ensure};
use futures::future::BoxFuture;
use tokio::process::Command;

use super::{Contender, Launch, Reconciles, Setup, free_port};
use crate::convergence::phases::Ctx;

/// The kopf contender.
pub struct Kopf;

/// The one kopf peer.
pub static KOPF: Kopf = Kopf;

impl Contender for Kopf {
    fn name(&self) -> &'static str {
        "kopf"
    }

    fn describe(&self) -> String {
        "[`bench/kopf/database_operator.py`](../kopf/database_operator.py) under `kopf run --standalone \
         --namespace NS` (kopf's default settings; handlers on create, update and resume)"
            .to_owned()
    }

    fn max_n(&self) -> Option<usize> {
        Some(crate::convergence::settings::peer_max_n())
    }

    fn prepare<'a>(&'a self, ctx: &'a Ctx<'a>) -> BoxFuture<'a, Result<()>> {
        Box::pin(async move {
            let kopf = ctx.settings.venv.join("bin/kopf");
            ensure!(
                kopf.exists(),
                "{} missing: run bench/run.sh (make bench), which installs bench/kopf/requirements.txt",
                kopf.display()
            );
            Ok(())
        })
    }

    fn version(&self, ctx: &Ctx<'_>) -> Option<String> {
        let requirements = std::fs::read_to_string(ctx.settings.root.join("bench/kopf/requirements.txt")).ok()?;
        let kopf = requirements.lines().find_map(|l| l.strip_prefix("kopf=="))?;
        let python = std::process::Command::new(ctx.settings.venv.join("bin/python"))
            .arg("--version")
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
            .unwrap_or_default();
        Some(format!("kopf {kopf} ({python})"))
    }

    fn launch(&self, ctx: &Ctx<'_>, ns: &str, _setup: &Setup) -> Result<Launch> {
        let settings = ctx.settings;
        let admin = format!("127.0.0.1:{}", free_port()?);
        let stamp = jiff::Timestamp::now().as_millisecond();
        let marks = settings.state.join(format!("kopf-marks-{ns}-{stamp}.txt"));
        let mut command = Command::new(settings.venv.join("bin/kopf"));
        command
            .args(["run", "--standalone", "--namespace", ns])
            .arg(format!("--liveness=http://{admin}/healthz"))
            .arg(settings.root.join("bench/kopf/database_operator.py"))
            .env("BENCH_KOPF_MARKS", &marks);
        Ok(Launch {
            command,
            ready: (admin, "/healthz", false),
            reconciles: Reconciles::Lines(marks),
        })
    }
}
