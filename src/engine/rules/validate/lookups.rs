//! The lookups: ids, kinds, `matchLabels` (one per kind: the kind's one cache), `name` or
//! `list`, `maxItems`, and the name and namespace templates.

use std::collections::BTreeMap;

use super::RuleChecker;
use crate::engine::rules::model::LookupSpec;

/// The largest `maxItems` of a list lookup.
pub(crate) const MAX_LOOKUP_ITEMS: usize = 1000;

impl RuleChecker<'_> {
    /// Ids, kinds, `matchLabels` and the name and namespace templates of the lookups.
    pub(super) fn check_lookups(&mut self, rule: &str, lookups: &[LookupSpec]) {
        let mut ids = BTreeMap::new();
        // The first lookup of each kind: its `matchLabels` scope the kind's one cache.
        let mut first_of_kind: BTreeMap<(&str, &str), &LookupSpec> = BTreeMap::new();
        for lookup in lookups {
            let id = &lookup.id.value;
            self.check_id(&lookup.id, "lookup", &mut ids);
            match first_of_kind.entry((&lookup.api_version, &lookup.kind)) {
                std::collections::btree_map::Entry::Vacant(entry) => {
                    entry.insert(lookup);
                }
                std::collections::btree_map::Entry::Occupied(first)
                    if first.get().match_labels != lookup.match_labels =>
                {
                    self.report(
                        self.at(&lookup.id),
                        format!(
                            "lookup {id:?}: matchLabels {:?} differ from those of lookup {:?} of the same kind ({:?}); \
                             the lookups of one kind share one cache, so they must declare the same matchLabels",
                            lookup.match_labels,
                            first.get().id.value,
                            first.get().match_labels
                        ),
                        None,
                    );
                }
                std::collections::btree_map::Entry::Occupied(_) => {}
            }
            if let Some(key) = lookup
                .match_labels
                .keys()
                .find(|key| key.is_empty() || key.contains([',', '=', '!']))
            {
                self.report(
                    self.at(&lookup.id),
                    format!("lookup {id:?}: matchLabels key {key:?} is not a label key"),
                    None,
                );
            }
            if !lookup.api_version.contains('/') && lookup.api_version != "v1" {
                self.report(
                    self.at(&lookup.id),
                    format!(
                        "lookup {id:?}: apiVersion {:?} must be group/version or v1",
                        lookup.api_version
                    ),
                    None,
                );
            }
            if lookup.kind.is_empty() {
                self.report(
                    self.at(&lookup.id),
                    format!("lookup {id:?}: kind must not be empty"),
                    None,
                );
            }
            match (&lookup.name, lookup.list) {
                (Some(name), false) => {
                    self.compile_inline(rule, &format!("lookups.{id}.name"), &name.value, self.at(name));
                }
                (None, true) => {}
                (Some(_), true) | (None, false) => self.report(
                    self.at(&lookup.id),
                    format!("lookup {id:?}: give exactly one of name (one object) and list: true (every match)"),
                    None,
                ),
            }
            if lookup.max_items.is_some() && !lookup.list {
                self.report(
                    self.at(&lookup.id),
                    format!("lookup {id:?}: maxItems bounds a list lookup (list: true)"),
                    None,
                );
            }
            if let Some(max) = lookup.max_items.filter(|m| *m == 0 || *m > MAX_LOOKUP_ITEMS) {
                self.report(
                    self.at(&lookup.id),
                    format!("lookup {id:?}: maxItems {max} must be 1 to {MAX_LOOKUP_ITEMS}"),
                    None,
                );
            }
            if let Some(namespace) = lookup.namespace.as_ref().filter(|ns| ns.value.contains('*'))
                && (namespace.value.trim() != "*" || !lookup.list)
            {
                self.report(
                    self.at(namespace),
                    format!("lookup {id:?}: namespace \"*\" (every namespace) is for a list lookup, written alone"),
                    None,
                );
            }
            if let Some(namespace) = &lookup.namespace {
                self.compile_inline(
                    rule,
                    &format!("lookups.{id}.namespace"),
                    &namespace.value,
                    self.at(namespace),
                );
            }
        }
    }
}
