//! `ruleop render`: one parent planned offline ([`offline::render`]), or under a kept revision
//! read from the cluster ([`inspect::rollout::render_revision`]).

use std::path::PathBuf;
use std::process::ExitCode;

use clap::ValueEnum;

use crate::cmd::flags::{CrdFlags, SourceFlags};
use crate::cmd::output;
use crate::inspect;
use crate::offline::{self, OutputFormat, RenderInputs};

/// Plan one custom resource offline: print its children as multi-document YAML, then the
/// prune list, action decisions (with reasons) and the status patch as comments.
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    #[command(flatten)]
    sources: SourceFlags,
    #[command(flatten)]
    schemas: CrdFlags,
    /// The parent object (YAML). A missing uid, namespace or generation gets a placeholder.
    #[arg(short = 'f', long = "file", env = "RULEOP_RENDER_FILE")]
    file: PathBuf,
    /// Directory of YAML files with live children to plan against (their status feeds
    /// status fields and conditions). Objects without ruleop labels are matched to child
    /// ids by kind.
    #[arg(long, env = "RULEOP_OBSERVED")]
    observed: Option<PathBuf>,
    /// Output format.
    #[arg(long, short = 'o', value_enum, default_value_t = Format::Yaml, env = "RULEOP_OUTPUT")]
    output: Format,
    /// The time stamped on changed conditions (RFC 3339; default: now).
    #[arg(long, env = "RULEOP_NOW")]
    now: Option<String>,
    /// Render under kept revision N of the parent's rule instead of the files: its rule and
    /// templates are read from the cluster (ConfigMap ruleop-rev-<rule>-<N> in
    /// --status-namespace; `ruleop rollout history` lists them). The rule is the one the
    /// files give the parent's kind; the CRDs are still read from the files.
    #[arg(long, value_name = "N")]
    revision: Option<u64>,
    /// Namespace of the kept revisions (ruleop's own), with --revision.
    #[arg(long, env = "RULEOP_STATUS_NAMESPACE", default_value = "ruleop-system")]
    status_namespace: String,
}

/// How `render` prints the plan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Format {
    /// Children as YAML documents; everything else as `#` comments.
    Yaml,
    /// The whole plan as one JSON object.
    Json,
}

/// Prints the plan, or exits 1 when the parent cannot be planned.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args {
        sources,
        schemas,
        file,
        observed,
        output,
        now,
        revision,
        status_namespace,
    } = args;
    let now = now.unwrap_or_else(crate::records::clock::now_rfc3339);
    let inputs = RenderInputs {
        file: &file,
        observed: observed.as_deref(),
        output: match output {
            Format::Yaml => OutputFormat::Yaml,
            Format::Json => OutputFormat::Json,
        },
        now: &now,
    };
    let (sources, schemas) = (sources.into(), schemas.into());
    output::printed(match revision {
        None => offline::render(&sources, &schemas, &inputs),
        Some(revision) => inspect::rollout::render_revision(&sources, &schemas, &inputs, revision, &status_namespace),
    })
}
