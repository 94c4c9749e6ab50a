//! Render errors of a rule's inline strings (status fields, conditions, `when`, `forEach`, lookup
//! names...) relocated to the rule file: the message points at the line people edit, not at the
//! internal `<rule>#<field path>` template name.

use crate::engine::rules::Rule;
use crate::engine::rules::model::Located;
use crate::engine::template::RenderError;

/// Where in the rule file a failed inline template or expression is: the line of its value
/// plus the line within it, so the message points at the file people edit, not at the
/// internal `<rule>#<field path>` template name.
pub(crate) fn located<T>(rule: &Rule, source: &Located<T>, error: &RenderError) -> String {
    let start = &source.referenced;
    let within = error.line.unwrap_or(1).max(1) as u64 - 1;
    if within == 0 && start.column() > 0 {
        format!("{}:{}:{}", rule.file.display(), start.line(), start.column())
    } else {
        format!("{}:{}", rule.file.display(), start.line() + within)
    }
}

/// A render error of an inline template or expression, relocated to the rule file's line.
pub(crate) fn relocate<T>(rule: &Rule, source: &Located<T>, error: RenderError) -> RenderError {
    let at = located(rule, source, &error);
    RenderError {
        template: Some(at),
        line: None,
        message: error.message,
    }
}
