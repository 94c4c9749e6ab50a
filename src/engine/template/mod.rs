//! Rendering: one strict minijinja environment per rule set, compiled once, shared by every plan.
//!
//! Two environments: `yaml` renders object templates through the injection guard
//! ([`inert::format_value`]); `text` renders short inline strings (status fields, condition
//! reasons, webhook URLs and bodies) whose output is a string value, not YAML.

pub mod inert;

use minijinja::value::{Serde, Value, ValueKind};
use minijinja::{Environment, UndefinedBehavior};
use serde::Serialize;

/// Instructions one render may execute before it is stopped (loops over huge lists, recursion).
pub const FUEL: u64 = 500_000;
/// Largest rendered output accepted, in bytes.
pub const MAX_OUTPUT_BYTES: usize = 1 << 20;

/// A failed render or expression evaluation, with the template and line when known.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}{message}", location_prefix(.template, *.line))]
pub struct RenderError {
    /// Template name (its path under the templates directory, or an inline template's label).
    pub template: Option<String>,
    /// 1-based line within that template.
    pub line: Option<usize>,
    /// What went wrong.
    pub message: String,
}

fn location_prefix(template: &Option<String>, line: Option<usize>) -> String {
    match (template, line) {
        (Some(t), Some(l)) => format!("{t}:{l}: "),
        (Some(t), None) => format!("{t}: "),
        _ => String::new(),
    }
}

impl RenderError {
    fn from_minijinja(err: &minijinja::Error, fallback_name: &str) -> Self {
        let mut message = err.detail().map_or_else(|| err.kind().to_string(), str::to_owned);
        if err.kind() == minijinja::ErrorKind::OutOfFuel {
            message = format!("template ran out of fuel ({FUEL} instructions): is a loop unbounded?");
        }
        let template = err
            .name()
            .filter(|n| *n != "<expression>" && *n != "<string>")
            .unwrap_or(fallback_name);
        RenderError {
            template: Some(template.to_owned()),
            line: err.line(),
            message,
        }
    }

    /// An error that is not tied to a template line.
    pub fn in_template(template: &str, message: impl Into<String>) -> Self {
        RenderError {
            template: Some(template.to_owned()),
            line: None,
            message: message.into(),
        }
    }
}

/// The compiled templates and inline strings of one rule set.
#[derive(Debug)]
pub struct Renderer {
    yaml: Environment<'static>,
    text: Environment<'static>,
}

/// A compile error of one template or inline string.
#[derive(Debug)]
pub struct CompileError {
    /// Template name.
    pub name: String,
    /// 1-based line in the template.
    pub line: Option<usize>,
    /// Byte range in the template source.
    pub range: Option<std::ops::Range<usize>>,
    /// What is wrong.
    pub message: String,
}

impl CompileError {
    fn from_minijinja(name: &str, err: &minijinja::Error) -> Self {
        CompileError {
            name: name.to_owned(),
            line: err.line(),
            range: err.range(),
            message: err.detail().map_or_else(|| err.kind().to_string(), str::to_owned),
        }
    }
}

fn strict_environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(FUEL));
    env.add_filter("dig", dig);
    env.add_function("fail", fail);
    env
}

/// `fail("why")`: ends rendering with this message (located at the template's line), for a
/// template that refuses a value rather than render it, e.g. a `system:` user name.
fn fail(message: String) -> Result<Value, minijinja::Error> {
    Err(minijinja::Error::new(minijinja::ErrorKind::InvalidOperation, message))
}

/// `value | dig("a.b.0.c", default)`: a nested lookup that yields `default` (or none) where
/// strict mode would fail on a missing key, e.g. `children | dig("db.status.readyReplicas", 0)`.
fn dig(value: Value, path: &str, default: Option<Value>) -> Value {
    let mut current = value;
    for segment in path.split('.') {
        let next = match segment.parse::<usize>() {
            Ok(index) if current.kind() == ValueKind::Seq => current.get_item_by_index(index),
            _ => current.get_attr(segment),
        };
        match next {
            Ok(found) if !found.is_undefined() && !found.is_none() => current = found,
            _ => return default.unwrap_or_else(|| Value::from(())),
        }
    }
    current
}

impl Default for Renderer {
    fn default() -> Self {
        let mut yaml = strict_environment();
        yaml.set_formatter(inert::format_value);
        Renderer {
            yaml,
            text: strict_environment(),
        }
    }
}

impl Renderer {
    /// Compiles an object template (rendered through the injection guard).
    pub fn add_yaml_template(&mut self, name: String, source: String) -> Result<(), CompileError> {
        let label = name.clone();
        self.yaml
            .add_template_owned(name, source)
            .map_err(|e| CompileError::from_minijinja(&label, &e))
    }

    /// Compiles an inline string template (status fields, reasons, URLs).
    pub fn add_text_template(&mut self, name: String, source: String) -> Result<(), CompileError> {
        let label = name.clone();
        self.text
            .add_template_owned(name, source)
            .map_err(|e| CompileError::from_minijinja(&label, &e))
    }

    /// Whether an object template of that name was compiled.
    pub fn has_yaml_template(&self, name: &str) -> bool {
        self.yaml.get_template(name).is_ok()
    }

    /// Checks that an expression compiles.
    pub fn check_expression(&self, label: &str, expression: &str) -> Result<(), CompileError> {
        self.text
            .compile_expression(expression)
            .map(drop)
            .map_err(|e| CompileError::from_minijinja(label, &e))
    }

    /// Renders an object template to YAML text.
    pub fn render_yaml(&self, name: &str, context: &Value) -> Result<String, RenderError> {
        render(&self.yaml, name, context)
    }

    /// Renders an inline string template.
    pub fn render_text(&self, name: &str, context: &Value) -> Result<String, RenderError> {
        render(&self.text, name, context)
    }

    /// Evaluates an expression to a value (`when`, conditions).
    pub fn eval(&self, label: &str, expression: &str, context: &Value) -> Result<Value, RenderError> {
        let compiled = self
            .text
            .compile_expression(expression)
            .map_err(|e| RenderError::from_minijinja(&e, label))?;
        compiled
            .eval(context)
            .map_err(|e| RenderError::from_minijinja(&e, label))
    }

    /// Evaluates an expression for its truth (`when`): a strict boolean reading of the value.
    pub fn eval_bool(&self, label: &str, expression: &str, context: &Value) -> Result<bool, RenderError> {
        self.eval(label, expression, context).map(|v| v.is_true())
    }
}

fn render(env: &Environment<'static>, name: &str, context: &Value) -> Result<String, RenderError> {
    let template = env
        .get_template(name)
        .map_err(|e| RenderError::from_minijinja(&e, name))?;
    let output = template
        .render(context)
        .map_err(|e| RenderError::from_minijinja(&e, name))?;
    if output.len() > MAX_OUTPUT_BYTES {
        return Err(RenderError::in_template(
            name,
            format!(
                "rendered {} bytes, more than the limit of {MAX_OUTPUT_BYTES}",
                output.len()
            ),
        ));
    }
    Ok(output)
}

/// Converts any serialisable value into a template value.
pub fn to_value<T: Serialize>(value: &T) -> Value {
    Value::from(Serde(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn eval(expression: &str, context: serde_json::Value) -> String {
        Renderer::default()
            .eval("test", expression, &to_value(&context))
            .expect("evaluates")
            .to_string()
    }

    #[test]
    fn dig_reaches_nested_values_and_falls_back() {
        let ctx = serde_json::json!({"c": {"db": {"status": {"n": 3}, "list": [{"x": 1}]}}});
        assert_eq!(eval("c | dig('db.status.n', 0)", ctx.clone()), "3");
        assert_eq!(eval("c | dig('db.list.0.x')", ctx.clone()), "1");
        assert_eq!(eval("c | dig('db.missing.n', 0)", ctx.clone()), "0");
        assert_eq!(eval("c | dig('nope') is none", ctx), "True");
    }

    #[test]
    fn undefined_variables_are_errors() {
        let err = Renderer::default().eval("t", "spec.missing.deeper", &to_value(&serde_json::json!({"spec": {}})));
        assert!(err.expect_err("strict").message.contains("undefined"));
    }
}
