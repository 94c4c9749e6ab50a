//! Flag groups that several subcommands flatten into their `Args`, each turned into the plain
//! value the features take.

use std::path::PathBuf;

use crate::offline::{SchemaSources, Sources};

// No `///` on these groups: clap could take a flattened group's doc for the command's help.

// Where the rules and templates live.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct SourceFlags {
    /// Directory of rule files (*.yaml, *.yml; read recursively, dot entries skipped).
    #[arg(long, env = "RULEOP_RULES", default_value = "rules")]
    rules: PathBuf,
    /// Directory of templates; a rule names a template by its path relative to this directory.
    #[arg(long, env = "RULEOP_TEMPLATES", default_value = "templates")]
    templates: PathBuf,
}

impl From<SourceFlags> for Sources {
    fn from(flags: SourceFlags) -> Self {
        let SourceFlags { rules, templates } = flags;
        Sources { rules, templates }
    }
}

// Where the schemas of custom resource kinds come from, for the offline commands.
#[derive(Debug, Clone, clap::Args)]
pub(crate) struct CrdFlags {
    /// CRD files or directories (walked for *.yaml, *.yml) whose schemas type the parent's reads,
    /// status writes and custom resource children, and whose defaults apply to a parent before
    /// it is planned, as the API server does. Repeat the flag or separate paths with commas.
    /// Default: deploy/crds beside the rules directory, or else crds beside it, when one exists.
    #[arg(long = "crds", env = "RULEOP_CRDS", value_delimiter = ',')]
    crds: Vec<PathBuf>,
}

impl From<CrdFlags> for SchemaSources {
    fn from(flags: CrdFlags) -> Self {
        let CrdFlags { crds } = flags;
        SchemaSources { crds }
    }
}
