//! ruleop itself: `ruleop run` with the shipped rules, and with a rule that has no actions (the
//! children alone, to compare with kro, which has no one-shot actions).

use anyhow::Result;
use tokio::process::Command;

use super::{Contender, Extras, Launch, Reconciles, Setup, free_port};
use crate::convergence::phases::Ctx;

/// `ruleop run` over one rules directory.
pub struct Ruleop {
    name: &'static str,
    /// The rules directory, relative to the repository root.
    rules: &'static str,
    /// Whether its rule has the backup action.
    backup: bool,
    extras: Extras,
}

/// The shipped rules (Database and Cache), with the resync and reload phases.
pub static RULEOP: Ruleop = Ruleop {
    name: "ruleop",
    rules: "rules",
    backup: true,
    extras: Extras {
        resync: true,
        reload: true,
        fairness: true,
    },
};

/// bench/ruleop-children/database.yaml: the Database rule without its actions.
pub static RULEOP_CHILDREN: Ruleop = Ruleop {
    name: "ruleop-children",
    rules: "bench/ruleop-children",
    backup: false,
    extras: Extras {
        resync: false,
        reload: false,
        fairness: false,
    },
};

impl Contender for Ruleop {
    fn name(&self) -> &'static str {
        self.name
    }

    fn describe(&self) -> String {
        format!(
            "`target/release/ruleop run --rules {} --templates templates --namespace NS` (default logging){}",
            self.rules,
            if self.backup {
                ", the shipped rules"
            } else {
                ": the Database rule without actions (Service, StatefulSet, status), the kro comparison"
            }
        )
    }

    fn runs_backup(&self) -> bool {
        self.backup
    }

    fn extras(&self) -> Extras {
        self.extras
    }

    fn launch(&self, ctx: &Ctx<'_>, ns: &str, setup: &Setup) -> Result<Launch> {
        let settings = ctx.settings;
        let admin = format!("127.0.0.1:{}", free_port()?);
        let rules = setup.rules.clone().unwrap_or_else(|| settings.root.join(self.rules));
        let templates = setup
            .templates
            .clone()
            .unwrap_or_else(|| settings.root.join("templates"));
        let mut command = Command::new(&settings.ruleop_bin);
        command
            .arg("run")
            .arg("--rules")
            .arg(rules)
            .arg("--templates")
            .arg(templates)
            .args(if setup.all_namespaces {
                vec![]
            } else {
                vec!["--namespace", ns]
            })
            .args(["--admin-addr", &admin])
            .env_remove("RUST_LOG")
            .env("NO_COLOR", "1")
            // The allocator settings the Deployment (deploy/helm/ruleop/templates/deployment.yaml) runs ruleop with.
            .env("MIMALLOC_ALLOW_THP", "0")
            .env("MIMALLOC_PURGE_DELAY", "0");
        Ok(Launch {
            command,
            ready: (admin.clone(), "/readyz", true),
            reconciles: Reconciles::Metric {
                addr: admin,
                name: "ruleop_reconciles_total",
                labels: &[("rule", "database")],
            },
        })
    }
}
