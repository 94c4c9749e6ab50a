//! Tests that need no control plane: the CLI, fixtures and their snapshots, RuleTest, the
//! injection guard, fuzz regressions, import layers, docs links, the architecture page, the
//! metric guide, the freshness of every generated file and the bench README's generated figures
//! (`make unit` runs these).

mod architecture_page;
mod bench_figures;
mod cli;
mod docs_links;
mod fixtures;
mod fuzz_regressions;
mod generated;
mod injection;
mod layers;
mod reference_docs;
mod ruletest;
