//! Status fields and conditions, evaluated apart from children: a failing status expression
//! costs only its own field or condition, never the children it reports on.
//!
//! A natural condition such as `children.deployment.status.availableReplicas >= spec.replicas`
//! is undefined until the Deployment exists; if it failed the whole plan, the Deployment would
//! never be created. So a condition whose expression fails becomes `Unknown` with reason
//! [`EXPRESSION_FAILED`] and a message pointing at the rule file's line, and a field that fails
//! keeps its current value. Both are listed as problems for `ruleop render` and the log.

use serde_json::{Map, Value, json};

use super::observed::Observed;
use super::relocate::located;
use super::status::{ConditionStatus, WantedCondition};
use crate::engine::rules::Rule;
use crate::engine::rules::model::{ConditionSpec, FieldSource, Located};
use crate::engine::template::{RenderError, Renderer};

/// The reason of a condition whose expression (or reason or message template) failed.
pub(crate) const EXPRESSION_FAILED: &str = "ExpressionFailed";

/// The status a rule asks for, as far as it could be evaluated.
#[derive(Debug, Clone, Default, PartialEq)]
pub(crate) struct EvaluatedStatus {
    /// Fields that evaluated (`null` removes one); failed fields are absent, so they keep
    /// whatever the status holds.
    pub fields: Map<String, Value>,
    /// Every condition the rule defines, `Unknown` where evaluation failed.
    pub conditions: Vec<WantedCondition>,
    /// What failed, each with the rule file's location.
    pub problems: Vec<String>,
}

/// Evaluates the rule's status fields and conditions against the context of one plan.
pub(crate) fn evaluate(
    renderer: &Renderer,
    rule: &Rule,
    children: &Observed<'_>,
    context: &minijinja::Value,
) -> EvaluatedStatus {
    let mut evaluated = EvaluatedStatus::default();
    for (field, source) in &rule.spec.status.fields {
        let path = format!("status.fields.{field}");
        let label = rule.inline_template(&path);
        let computed = match &source.value {
            FieldSource::Template(_) => renderer.render_text(&label, context).map(|text| json!(text)),
            FieldSource::Expression(expression) => renderer
                .eval(&label, &expression.value, context)
                .and_then(|v| json_of(&v).map_err(|message| RenderError::in_template(&label, message))),
            FieldSource::FromChild(from) => Ok(children
                .value(&from.child)
                .and_then(|child| first_match(child.as_ref(), &from.json_path))
                .unwrap_or(Value::Null)),
        };
        let value = match computed {
            Ok(value) => value,
            Err(e) => {
                let at = located(rule, source, &e);
                evaluated.problems.push(format!(
                    "{at}: {path}: {}; the field keeps its current value",
                    e.message
                ));
                continue;
            }
        };
        evaluated.fields.insert(field.clone(), value);
    }
    for condition in &rule.spec.status.conditions {
        match evaluate_condition(renderer, rule, condition, context) {
            Ok(wanted) => evaluated.conditions.push(wanted),
            Err(failure) => {
                evaluated.problems.push(failure.clone());
                evaluated.conditions.push(WantedCondition {
                    type_: condition.type_.clone(),
                    status: ConditionStatus::Unknown,
                    reason: EXPRESSION_FAILED.to_owned(),
                    message: failure,
                });
            }
        }
    }
    evaluated
}

/// A template value as JSON: what serialises (numbers, booleans, strings, lists, mappings, none);
/// an undefined value or a callable is an error.
fn json_of(value: &minijinja::Value) -> Result<Value, String> {
    if value.is_undefined() {
        return Err("the expression is undefined".to_owned());
    }
    serde_json::to_value(value).map_err(|e| format!("the value cannot be written to status: {e}"))
}

/// One condition: `when` decides True or False, then its reason and message render. Any
/// failure is returned as a message located in the rule file.
fn evaluate_condition(
    renderer: &Renderer,
    rule: &Rule,
    condition: &ConditionSpec,
    context: &minijinja::Value,
) -> Result<WantedCondition, String> {
    let type_ = &condition.type_;
    let failed =
        |what: &str, at: String, e: &RenderError| format!("{at}: status.conditions[{type_}].{what}: {}", e.message);
    let when = &condition.when;
    let label = rule.inline_template(&format!("status.conditions.{type_}.when"));
    let holds = renderer
        .eval_bool(&label, &when.value, context)
        .map_err(|e| failed("when", located(rule, when, &e), &e))?;
    let text = |what: &str, given: &Option<Located<String>>, default: &str| -> Result<String, String> {
        match given {
            Some(source) => renderer
                .render_text(
                    &rule.inline_template(&format!("status.conditions.{type_}.{what}")),
                    context,
                )
                .map_err(|e| failed(what, located(rule, source, &e), &e)),
            None => Ok(default.to_owned()),
        }
    };
    let reason = if holds {
        text("reason", &condition.reason, "AsExpected")?
    } else {
        text("falseReason", &condition.false_reason, "NotYet")?
    };
    Ok(WantedCondition {
        type_: type_.clone(),
        status: holds.into(),
        reason,
        message: text("message", &condition.message, "")?,
    })
}

/// The first value `path` (RFC 9535 JSONPath) selects in `object`, as a status field reads it;
/// `None` when nothing matches or the path does not parse.
pub(crate) fn first_match(object: &Value, path: &str) -> Option<Value> {
    jsonpath_rust::query::js_path_vals(path, object)
        .ok()?
        .first()
        .map(|v| (*v).clone())
}
