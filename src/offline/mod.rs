//! The offline commands: the engine without a cluster. `check` ([`check`]), `render`
//! ([`render`], planning a parent from files in [`parent`]), `test` ([`ruletest`]), and what the
//! rules generate: `rbac`, `crd`, `schema` ([`generate`]). No client, no async runtime.

pub(crate) mod check;
pub(crate) mod generate;
pub(crate) mod parent;
pub(crate) mod render;
pub(crate) mod ruletest;

use std::path::{Path, PathBuf};

use crate::engine::rules::RuleSet;
use crate::engine::rules::load::load;
use crate::engine::schema::Catalog;
use crate::engine::schema_check;

pub use check::check;
pub use render::{OutputFormat, RenderInputs, render};

/// Where the rules and templates are read from.
#[derive(Debug, Clone)]
pub struct Sources {
    /// Directory of rule files.
    pub rules: PathBuf,
    /// Directory of templates.
    pub templates: PathBuf,
}

/// Where the schemas of custom resource kinds come from.
#[derive(Debug, Clone, Default)]
pub struct SchemaSources {
    /// CRD files or directories; none: `deploy/crds`, else `crds`, beside the rules directory.
    pub crds: Vec<PathBuf>,
}

impl SchemaSources {
    /// The paths to read: the ones given, or `deploy/crds` (else `crds`) beside `rules`.
    pub(crate) fn paths(&self, rules: &Path) -> Vec<PathBuf> {
        if !self.crds.is_empty() {
            return self.crds.clone();
        }
        let beside = rules.parent().unwrap_or(Path::new(""));
        [beside.join("deploy").join("crds"), beside.join("crds")]
            .into_iter()
            .find(|dir| dir.is_dir())
            .into_iter()
            .collect()
    }
}

/// A failed offline command: the text to print on stderr.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct CommandError(pub String);

/// Loads the rules and checks them against the schemas `schemas` names: the set, carrying
/// those schemas, and the warnings (kinds that have none).
pub(crate) fn load_checked(sources: &Sources, schemas: &SchemaSources) -> Result<(RuleSet, Vec<String>), CommandError> {
    let set = load(&sources.rules, &sources.templates).map_err(|d| CommandError(d.to_string()))?;
    let mut catalog = Catalog::read(&schemas.paths(&sources.rules)).map_err(|d| CommandError(d.to_string()))?;
    let generated = schema_check::crd::check_committed(&set, &mut catalog);
    let mut report = schema_check::rule_check::check(&set, &catalog, &sources.templates);
    report.errors.splice(0..0, generated.errors);
    report.warnings.splice(0..0, generated.warnings);
    if !report.errors.is_empty() {
        return Err(CommandError(
            crate::engine::diagnostic::Diagnostics(report.errors).to_string(),
        ));
    }
    // The set is built here, once: loaded, then given the schemas it was checked against.
    Ok((
        RuleSet {
            schemas: catalog,
            ..set
        },
        report.warnings,
    ))
}
