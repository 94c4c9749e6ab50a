//! The rule document's own fields: `apiVersion`, `kind` and `metadata.name`; `spec.resync` and
//! the concurrency settings.

use std::time::Duration;

use super::RuleChecker;
use crate::engine::base::k8s_names::is_dns_label;
use crate::engine::diagnostic::SourceLocation;
use crate::engine::duration;
use crate::engine::rules::model::{RULE_API_VERSION, RULE_KIND, RuleDocument, RuleSpec};

impl RuleChecker<'_> {
    /// `apiVersion`, `kind` and `metadata.name`: the rule's name and where it is written.
    pub(super) fn check_document(&mut self, doc: &RuleDocument) -> (String, SourceLocation) {
        if doc.api_version.value != RULE_API_VERSION {
            self.report(
                self.at(&doc.api_version),
                format!(
                    "apiVersion must be {RULE_API_VERSION}, found {:?}",
                    doc.api_version.value
                ),
                None,
            );
        }
        if doc.kind.value != RULE_KIND {
            self.report(
                self.at(&doc.kind),
                format!("kind must be {RULE_KIND}, found {:?}", doc.kind.value),
                None,
            );
        }
        let name = doc.metadata.name.value.clone();
        let name_at = self.at(&doc.metadata.name);
        if !is_dns_label(&name) {
            self.report(
                name_at.clone(),
                format!("metadata.name {name:?} is not a DNS label"),
                Some("use lowercase letters, digits and '-', at most 63 characters"),
            );
        }
        (name, name_at)
    }

    /// `spec.resync` (parsed), `maxConcurrentReconciles` and `reloadConcurrency`.
    pub(super) fn check_timing(&mut self, spec: &RuleSpec) -> Option<Duration> {
        let resync =
            spec.resync
                .as_ref()
                .and_then(|r| match duration::parse_at_least(&r.value, duration::MIN_RESYNC) {
                    Ok(d) => Some(d),
                    Err(e) => {
                        self.report(
                            self.at(r),
                            format!("spec.resync: {e}"),
                            Some("write e.g. 30s, 10m or 1h (at least 1s)"),
                        );
                        None
                    }
                });
        if let Some(zero) = spec.max_concurrent_reconciles.as_ref().filter(|c| c.value == 0) {
            self.report(self.at(zero), "spec.maxConcurrentReconciles must be at least 1", None);
        }
        let concurrency = spec.concurrency();
        if let Some(reload) = spec
            .reload_concurrency
            .as_ref()
            .filter(|reload| reload.value < concurrency)
        {
            self.report(
                self.at(reload),
                format!(
                    "spec.reloadConcurrency ({}) is less than maxConcurrentReconciles ({concurrency})",
                    reload.value
                ),
                Some("a reload runs at least as many reconciles at once as any other time: raise it or leave it out"),
            );
        }
        resync
    }
}
