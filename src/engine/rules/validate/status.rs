//! What the rule writes into the parent's status: `status.fields` (templates, expressions,
//! `fromChild` JSONPaths), `status.conditions`, nothing at all when the rule writes no status,
//! and `spec.rollout`, which watches a condition the rule writes.

use std::collections::BTreeMap;

use super::{RuleChecker, known, one_line};
use crate::engine::diagnostic::SourceLocation;
use crate::engine::rules::model::{FieldSource, Located, RuleSpec};
use crate::engine::rules::rollout_policy::{self as rollout, Rollout};

impl RuleChecker<'_> {
    /// `status.fields`: each template compiles, each expression parses, each `fromChild` names a
    /// child and a JSONPath.
    pub(super) fn check_status_fields(&mut self, name: &str, spec: &RuleSpec, child_ids: &BTreeMap<String, ()>) {
        for (field, source) in &spec.status.fields {
            let path = format!("status.fields.{field}");
            match &source.value {
                FieldSource::Template(text) => self.compile_inline(name, &path, text, self.at(source)),
                FieldSource::Expression(expression) => {
                    let located = Located::new(expression.value.clone(), source.referenced, source.defined);
                    self.check_expression(&located, &path);
                }
                FieldSource::FromChild(from) => {
                    if !child_ids.contains_key(from.child.as_str()) {
                        self.report(
                            self.at(source),
                            format!("{path}: no child with id {:?}", from.child),
                            Some(&format!("known children: {}", known(child_ids))),
                        );
                    }
                    if let Err(e) = jsonpath_rust::parser::parse_json_path(&from.json_path) {
                        self.report(
                            self.at(source),
                            format!(
                                "{path}: invalid JSONPath {:?}: {}",
                                from.json_path,
                                one_line(&e.to_string())
                            ),
                            Some("write an RFC 9535 path such as $.status.readyReplicas"),
                        );
                    }
                }
            }
        }
    }

    /// A rule that writes no status (`status.write: false`, the default for a built-in kind) can
    /// have nothing that lives there: status fields, conditions, or actions (whose runs are
    /// recorded in `status.actions`).
    pub(super) fn check_status_written(&mut self, spec: &RuleSpec) {
        let watch = &spec.watch;
        if spec
            .status
            .write
            .unwrap_or_else(|| !crate::engine::rules::is_built_in_api(&watch.api_version))
        {
            return;
        }
        let why = if spec.status.write == Some(false) {
            "this rule sets status.write: false".to_owned()
        } else {
            format!(
                "{} {} is a built-in kind whose status belongs to its own controller, so the rule writes none",
                watch.api_version, watch.kind
            )
        };
        let hint =
            "decorate it with children only; set status.write: true only for a kind whose status no controller owns";
        let mut located: Vec<(SourceLocation, String)> = spec
            .status
            .fields
            .iter()
            .map(|(field, source)| (self.at(source), format!("status.fields.{field}")))
            .collect();
        located.extend(
            spec.status
                .conditions
                .iter()
                .map(|c| (self.at(&c.when), format!("status.conditions[{}]", c.type_))),
        );
        located.extend(spec.actions.iter().map(|a| {
            (
                self.at(&a.id),
                format!("actions.{} (runs are recorded in status.actions)", a.id.value),
            )
        }));
        for (at, what) in located {
            self.report(at, format!("{what}: {why}"), Some(hint));
        }
    }

    /// `spec.rollout`, validated into the policy (`None` when absent or invalid).
    pub(super) fn check_rollout(&mut self, spec: &RuleSpec) -> Option<Rollout> {
        spec.rollout.as_ref().and_then(|block| {
            let writes_status = spec
                .status
                .write
                .unwrap_or_else(|| !crate::engine::rules::is_built_in_api(&spec.watch.api_version));
            match rollout::validate(block, &spec.status, writes_status) {
                Ok(policy) => Some(policy),
                Err(problems) => {
                    for problem in problems {
                        let at = SourceLocation::from_span(self.file, &problem.at);
                        self.report(at, problem.message, Some(problem.hint));
                    }
                    None
                }
            }
        })
    }

    /// `status.conditions`: unique types, `when` expressions, and reason and message templates.
    pub(super) fn check_conditions(&mut self, name: &str, spec: &RuleSpec) {
        let mut condition_types = BTreeMap::new();
        for (i, condition) in spec.status.conditions.iter().enumerate() {
            let at = self.at(&condition.when);
            if condition_types.insert(condition.type_.clone(), ()).is_some() {
                self.report(
                    at.clone(),
                    format!("condition type {:?} is defined twice", condition.type_),
                    None,
                );
            }
            self.check_expression(&condition.when, &format!("status.conditions[{i}].when"));
            for (what, text) in [
                ("reason", &condition.reason),
                ("falseReason", &condition.false_reason),
                ("message", &condition.message),
            ] {
                if let Some(text) = text {
                    self.compile_inline(
                        name,
                        &format!("status.conditions.{}.{what}", condition.type_),
                        &text.value,
                        self.at(text),
                    );
                }
            }
        }
    }
}
