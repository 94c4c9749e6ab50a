//! The children: unique ids, templates that exist, `when`, the collection fields (`forEach`,
//! `key`, `maxItems`, `scaling`, `updateStrategy`, `readyWhen`) and the `dependsOn` graph.

use std::collections::BTreeMap;

use super::RuleChecker;
use crate::engine::rules::graph::graph_problems;
use crate::engine::rules::model::{ChildSpec, RuleSpec, Scaling};

impl RuleChecker<'_> {
    /// Every child, then the `dependsOn` graph: the children's ids.
    pub(super) fn check_children(&mut self, name: &str, spec: &RuleSpec) -> BTreeMap<String, ()> {
        let mut child_ids = BTreeMap::new();
        for (i, child) in spec.children.iter().enumerate() {
            self.check_id(&child.id, "child", &mut child_ids);
            self.check_template_exists(&child.template);
            if let Some(when) = &child.when {
                self.check_expression(when, &format!("spec.children[{i}].when"));
            }
            self.check_collection(name, i, child);
        }
        for problem in graph_problems(&spec.children) {
            self.report(self.at(problem.at), problem.message, Some(&problem.hint));
        }
        child_ids
    }

    /// `forEach`, `key`, `maxItems` and `readyWhen` of one child. Whether a `forEach` needs a
    /// `key` depends on its items (strings do not), which only rendering knows.
    fn check_collection(&mut self, rule: &str, i: usize, child: &ChildSpec) {
        let id = &child.id.value;
        if let Some(for_each) = &child.for_each {
            self.check_expression(for_each, &format!("spec.children[{i}].forEach"));
        } else {
            if let Some(key) = &child.key {
                self.report(
                    self.at(key),
                    format!("child {id:?}: key is set but forEach is not"),
                    Some("key names the items of a forEach; remove it or add forEach"),
                );
            }
            if child.max_items.is_some() {
                self.report(
                    self.at(&child.id),
                    format!("child {id:?}: maxItems is set but forEach is not"),
                    None,
                );
            }
            if child.scaling == Scaling::Ordered {
                self.report(
                    self.at(&child.id),
                    format!("child {id:?}: scaling Ordered orders the items of a forEach, and forEach is not set"),
                    Some("remove scaling, or give the child a forEach"),
                );
            }
            if child.update_strategy.is_rolling() {
                self.report(
                    self.at(&child.id),
                    format!(
                        "child {id:?}: updateStrategy {:?} rolls the items of a forEach, and forEach is not set",
                        child.update_strategy
                    ),
                    Some("use Recreate or InPlace for a single object"),
                );
            }
        }
        if let Some(key) = &child.key {
            self.compile_inline(rule, &format!("children.{id}.key"), &key.value, self.at(key));
        }
        if child.max_items == Some(0) {
            self.report(
                self.at(&child.id),
                format!("child {id:?}: maxItems must be at least 1"),
                None,
            );
        }
        if let Some(ready_when) = &child.ready_when {
            self.check_expression(ready_when, &format!("spec.children[{i}].readyWhen"));
        }
    }
}
