//! Tests that need no control plane: the CLI, fixtures and their snapshots, RuleTest, the
//! injection guard, fuzz regressions, import layers, docs links, the metric guide and the
//! freshness of every generated file (`make unit` runs these).

mod cli;
mod docs_links;
mod fixtures;
mod fuzz_regressions;
mod generated;
mod injection;
mod layers;
mod reference_docs;
mod ruletest;
