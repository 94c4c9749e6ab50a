//! What the rule does to the parent itself: `parentMetadata` (labels and annotations it may
//! write, as templates) and the `finalize` phase (`until`, `timeout`).

use super::RuleChecker;
use crate::engine::duration;
use crate::engine::rules::model::RuleSpec;

impl RuleChecker<'_> {
    /// `parentMetadata`: keys ruleop may write, values that compile.
    pub(super) fn check_parent_metadata(&mut self, name: &str, spec: &RuleSpec) {
        if let Some(metadata) = &spec.parent_metadata {
            for (field, entries) in [("labels", &metadata.labels), ("annotations", &metadata.annotations)] {
                for (key, template) in entries {
                    if key.is_empty() || key.contains([',', '=', '!', ' ']) || key.starts_with("ruleop.io/") {
                        self.report(
                            self.at(template),
                            format!("parentMetadata.{field}: {key:?} is not a key ruleop may write"),
                            Some("a label or annotation key such as example.com/decorated (ruleop.io/ keys are the engine's)"),
                        );
                    }
                    self.compile_inline(
                        name,
                        &format!("parentMetadata.{field}.{key}"),
                        &template.value,
                        self.at(template),
                    );
                }
            }
        }
    }

    /// `finalize.until` and `finalize.timeout`.
    pub(super) fn check_finalize(&mut self, spec: &RuleSpec) {
        if let Some(finalize) = &spec.finalize {
            self.check_expression(&finalize.until, "finalize.until");
            if let Some(timeout) = &finalize.timeout
                && let Err(e) = duration::parse(&timeout.value)
            {
                self.report(
                    self.at(timeout),
                    format!("finalize.timeout: {e}"),
                    Some("write e.g. 5m or 1h"),
                );
            }
        }
    }
}
