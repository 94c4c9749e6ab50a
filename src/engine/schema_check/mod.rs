//! A rule set checked against the schemas of the kinds it reads and writes: the parent fields
//! its templates and expressions read (`reads.rs`, `rule_check.rs`), and the CRD `ruleop crd`
//! generates from a rule's `spec.schema` (`crd.rs`). Above `rules` and `plan`, whose values it
//! checks; `schema` below them holds the schemas themselves.

pub(crate) mod crd;
pub(crate) mod reads;
pub(crate) mod rule_check;
