//! `ruleop schema`: the JSON Schema of rule or test files ([`offline::generate::schema`]).

use std::process::ExitCode;

use clap::ValueEnum;

use crate::cmd::output;
use crate::offline;
use crate::offline::generate::Document;

/// Print the JSON Schema of rule files (for editors; committed as schema/rule.schema.json),
/// or with `--kind rule-test` of test files (schema/ruletest.schema.json).
#[derive(Debug, clap::Args)]
pub(crate) struct Args {
    /// Which documents.
    #[arg(long, value_enum, default_value_t = Kind::Rule)]
    kind: Kind,
}

/// Which JSON Schema `ruleop schema` prints.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Kind {
    /// `kind: Rule` documents.
    Rule,
    /// `kind: RuleTest` documents.
    RuleTest,
}

/// Prints the schema.
pub(crate) fn run(args: Args) -> ExitCode {
    let Args { kind } = args;
    let document = match kind {
        Kind::Rule => Document::Rule,
        Kind::RuleTest => Document::RuleTest,
    };
    output::print(&offline::generate::schema(document));
    ExitCode::SUCCESS
}
