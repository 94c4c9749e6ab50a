//! Rendering: one strict minijinja environment per rule set, compiled once, shared by every plan.
//!
//! Two environments: `yaml` renders object templates through the injection guard
//! ([`inert::format_value`]); `text` renders short inline strings (status fields, condition
//! reasons, webhook URLs and bodies) whose output is a string value, not YAML. Neither
//! auto-escapes: minijinja would choose HTML or JSON escaping from a template's file extension
//! (and an inline template's name ends in its field path, say `status.fields.html`).

pub(crate) mod callees;
mod expressions;
pub(crate) mod functions;
pub(crate) mod inert;
pub(crate) mod placeholder;

use minijinja::value::{Serde, Value};
use minijinja::{AutoEscape, Environment, UndefinedBehavior};

pub(crate) use placeholder::Placeholders;
use serde::Serialize;

/// Instructions one render may execute before it is stopped (loops over huge lists, recursion).
pub(crate) const FUEL: u64 = 500_000;
/// Largest rendered output accepted, in bytes.
pub(crate) const MAX_OUTPUT_BYTES: usize = 1 << 20;

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
    /// The rules' expressions, compiled once against `text`.
    expressions: expressions::Expressions,
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
    env.set_auto_escape_callback(|_| AutoEscape::None);
    env.set_undefined_behavior(UndefinedBehavior::Strict);
    env.set_fuel(Some(FUEL));
    functions::register(&mut env);
    env
}

impl Default for Renderer {
    fn default() -> Self {
        let mut yaml = strict_environment();
        yaml.set_formatter(inert::format_value);
        yaml.add_filter("escape", inert::escape);
        yaml.add_filter("e", inert::escape);
        Renderer {
            yaml,
            text: strict_environment(),
            expressions: expressions::Expressions::default(),
        }
    }
}

impl Renderer {
    /// Compiles an object template (rendered through the injection guard).
    pub fn add_yaml_template(&mut self, name: String, source: String) -> Result<(), CompileError> {
        let label = name.clone();
        refuse_unknown_callees(callees::unknown_callees(&self.yaml, &label, &source), &label)?;
        self.yaml
            .add_template_owned(name, source)
            .map_err(|e| CompileError::from_minijinja(&label, &e))
    }

    /// Compiles an inline string template (status fields, reasons, URLs).
    pub fn add_text_template(&mut self, name: String, source: String) -> Result<(), CompileError> {
        let label = name.clone();
        refuse_unknown_callees(callees::unknown_callees(&self.text, &label, &source), &label)?;
        self.text
            .add_template_owned(name, source)
            .map_err(|e| CompileError::from_minijinja(&label, &e))
    }

    /// The source of a compiled object template (what schema checks read).
    pub fn yaml_source(&self, name: &str) -> Option<String> {
        self.yaml.get_template(name).ok().map(|t| t.source().to_owned())
    }

    /// Whether an object template of that name was compiled.
    pub fn has_yaml_template(&self, name: &str) -> bool {
        self.yaml.get_template(name).is_ok()
    }

    /// Checks that an expression compiles.
    pub fn check_expression(&self, label: &str, expression: &str) -> Result<(), CompileError> {
        self.text
            .compile_expression(expression)
            .map_err(|e| CompileError::from_minijinja(label, &e))?;
        refuse_unknown_callees(
            callees::unknown_callees_of_expression(&self.text, label, expression),
            label,
        )
    }

    /// Renders an object template to YAML text and the strings to put back once it is parsed
    /// ([`Placeholders::restore`]).
    pub fn render_yaml(&self, name: &str, context: &Value) -> Result<Rendered, RenderError> {
        let template = self
            .yaml
            .get_template(name)
            .map_err(|e| RenderError::from_minijinja(&e, name))?;
        let mut captured = template
            .render_captured(context)
            .map_err(|e| RenderError::from_minijinja(&e, name))?;
        let placeholders = captured
            .with_state_mut(|state| state.get_extension_mut::<Placeholders>().map(std::mem::take))
            .unwrap_or_default();
        let text = check_size(name, captured.into_output())?;
        Ok(Rendered { text, placeholders })
    }

    /// Renders an inline string template.
    pub fn render_text(&self, name: &str, context: &Value) -> Result<String, RenderError> {
        render(&self.text, name, context)
    }

    /// Evaluates an expression to a value (`when`, conditions).
    pub fn eval(&self, label: &str, expression: &str, context: &Value) -> Result<Value, RenderError> {
        self.expressions
            .eval(&self.text, expression, context)
            .map_err(|e| RenderError::from_minijinja(&e, label))
    }

    /// Evaluates an expression for its truth (`when`): a strict boolean reading of the value.
    pub fn eval_bool(&self, label: &str, expression: &str, context: &Value) -> Result<bool, RenderError> {
        self.eval(label, expression, context).map(|v| v.is_true())
    }
}

/// The first filter or test a template names that does not exist, as a compile error.
fn refuse_unknown_callees(unknown: Vec<callees::UnknownCallee>, name: &str) -> Result<(), CompileError> {
    match unknown.into_iter().next() {
        None => Ok(()),
        Some(callee) => Err(CompileError {
            name: name.to_owned(),
            line: callee.line,
            range: None,
            message: format!(
                "unknown {} `{}` (the filters and tests there are: docs/reference/templates.md)",
                callee.what, callee.name
            ),
        }),
    }
}

/// An object template's output: YAML text whose retyping strings are placeholders.
#[derive(Debug, Clone)]
pub struct Rendered {
    /// The rendered text, to parse.
    pub text: String,
    /// The strings the text holds as placeholders, to restore into the parsed value.
    pub placeholders: Placeholders,
}

fn render(env: &Environment<'static>, name: &str, context: &Value) -> Result<String, RenderError> {
    let template = env
        .get_template(name)
        .map_err(|e| RenderError::from_minijinja(&e, name))?;
    let output = template
        .render(context)
        .map_err(|e| RenderError::from_minijinja(&e, name))?;
    check_size(name, output)
}

fn check_size(name: &str, output: String) -> Result<String, RenderError> {
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

/// Whether a rule's text is a Jinja template rather than a constant (a constant lookup
/// namespace or schedule is the platform's, a template one is rendered per parent).
pub(crate) fn is_template(text: &str) -> bool {
    text.contains("{{") || text.contains("{%")
}

/// Converts any serialisable value into a template value.
pub(crate) fn to_value<T: Serialize>(value: &T) -> Value {
    Value::from(Serde(value))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Renders `source` as an object template called `name`, parses and restores it.
    fn object(name: &str, source: &str, context: serde_json::Value) -> Result<serde_json::Value, String> {
        let mut renderer = Renderer::default();
        renderer
            .add_yaml_template(name.to_owned(), source.to_owned())
            .map_err(|e| e.message)?;
        let rendered = renderer
            .render_yaml(name, &to_value(&context))
            .map_err(|e| e.to_string())?;
        let mut documents = crate::engine::yaml::documents(&rendered.text).map_err(|e| e.message)?;
        rendered.placeholders.restore(documents.remove(0)).map_err(|e| e.0)
    }

    const PAYLOAD: &str = "16\nannotations: {evil: x}\nfinalizers: [x]";

    #[test]
    fn escape_filters_cannot_bypass_the_guard_whatever_the_file_name() {
        let ctx = serde_json::json!({"v": PAYLOAD});
        for name in [
            "w.j2",
            "x.tmpl",
            "y.html.j2",
            "z.html",
            "c.xml",
            "d.json.j2",
            "e.yaml.j2",
            "f",
        ] {
            for source in [
                "a: {{ v | e }}",
                "a: {{ v | escape }}",
                "a: {{ v | e | e }}",
                "{% autoescape true %}a: {{ v }}{% endautoescape %}",
                "{% autoescape true %}a: {{ v | e }}{% endautoescape %}",
                "{% filter e %}a: {{ v }}{% endfilter %}",
            ] {
                let err = object(name, source, ctx.clone()).expect_err(&format!("{name}: {source}"));
                assert!(err.contains("not safe to insert raw"), "{name}: {source}: {err}");
            }
        }
    }

    #[test]
    fn escape_filters_write_an_inert_value_unchanged_and_keep_numbers() {
        let ctx = serde_json::json!({"v": "a&b<c>", "n": 3, "s": "16"});
        for name in ["w.j2", "y.html.j2", "e.yaml.j2"] {
            let got = object(name, "a: {{ v | e }}\nn: {{ n | e }}\ns: {{ s | escape }}", ctx.clone());
            assert_eq!(got, Ok(serde_json::json!({"a": "a&b<c>", "n": 3, "s": "16"})), "{name}");
        }
    }

    #[test]
    fn text_templates_never_escape_whatever_the_field_name() {
        let mut renderer = Renderer::default();
        for name in ["r#status.fields.html", "r#status.fields.yaml", "r#status.fields.json"] {
            renderer
                .add_text_template(name.to_owned(), "{{ v }}".to_owned())
                .expect("compiles");
            let got = renderer.render_text(name, &to_value(&serde_json::json!({"v": "<a&'b'>"})));
            assert_eq!(got.as_deref(), Ok("<a&'b'>"), "{name}");
        }
    }

    /// Every YAML 1.1 form that would re-type a string, from the issue and the spec.
    const RETYPING: &[&str] = &[
        "0755",
        "yes",
        "1e3",
        "null",
        "~",
        "true",
        "0x1F",
        "1_000",
        "12:30",
        ".inf",
        "16",
        "-1",
        "+1",
        "1.5",
        "0b101",
        "0o17",
        ".NaN",
        "-.inf",
        "Yes",
        "NO",
        "y",
        "n",
        "on",
        "OFF",
        "Null",
        "NULL",
        "FALSE",
        "True",
        "2001-12-14",
        "2001-12-14t21:59:43.10-05:00",
        "190:20:30",
        "<<",
        "=",
        "",
    ];

    #[test]
    fn a_parent_string_keeps_its_type_as_a_whole_scalar() {
        for s in RETYPING {
            let ctx = serde_json::json!({"v": s});
            for source in [
                "a: {{ v }}",
                "a: \"{{ v }}\"",
                "a: '{{ v }}'",
                "a: [{{ v }}]",
                "a: {b: {{ v }}}",
                "a:\n  - {{ v }}",
            ] {
                let got =
                    object("t.yaml.j2", source, ctx.clone()).unwrap_or_else(|e| panic!("{s:?} in {source:?}: {e}"));
                let want = match source {
                    s2 if s2.contains('[') || s2.contains("- ") => serde_json::json!({"a": [s]}),
                    s2 if s2.contains("{b") => serde_json::json!({"a": {"b": s}}),
                    _ => serde_json::json!({"a": s}),
                };
                assert_eq!(got, want, "{s:?} in {source:?}");
            }
        }
    }

    #[test]
    fn a_parent_string_keeps_its_type_embedded_and_as_a_key() {
        for s in RETYPING {
            let ctx = serde_json::json!({"v": s, "w": "1"});
            let got = object(
                "t.j2",
                "image: postgres:{{ v }}\nbare: {{ v }}{{ w }}\nquoted: \"x{{ v }}\"\nblock: |\n  {{ v }}\n{{ v }}: key\n",
                ctx,
            )
            .unwrap_or_else(|e| panic!("{s:?}: {e}"));
            let want = serde_json::json!({
                "image": format!("postgres:{s}"),
                "bare": format!("{s}1"),
                "quoted": format!("x{s}"),
                "block": format!("{s}\n"),
                *s: "key",
            });
            assert_eq!(got, want, "{s:?}");
        }
    }

    #[test]
    fn numbers_booleans_and_null_keep_their_types() {
        let ctx = serde_json::json!({"n": 16, "f": 1.5, "b": false, "z": null});
        let got = object(
            "t.yaml.j2",
            "n: {{ n }}\nf: {{ f }}\nb: {{ b }}\nz: {{ z }}\ns: v{{ n }}",
            ctx,
        );
        assert_eq!(
            got,
            Ok(serde_json::json!({"n": 16, "f": 1.5, "b": false, "z": null, "s": "v16"}))
        );
    }

    #[test]
    fn captured_blocks_and_macros_keep_the_type_of_what_they_hold() {
        let ctx = serde_json::json!({"v": "0755", "w": "16\nx: y"});
        let source = "{% macro m() %}{{ v }}{% endmacro %}{% set c %}{{ v }}{% endset %}\n\
                      a: {{ m() }}\nb: {{ c }}\nc: x{{ c }}\nd: {{ c | upper }}\n";
        let got = object("t.yaml.j2", source, ctx.clone());
        assert_eq!(
            got,
            Ok(serde_json::json!({"a": "0755", "b": "0755", "c": "x0755", "d": "0755"}))
        );
        let refused = object("t.yaml.j2", "{% set c %}x{{ v }}{% endset %}a: {{ c ~ w }}", ctx);
        assert!(refused.expect_err("line break").contains("not safe"));
    }

    #[test]
    fn strings_not_caught_as_retyping_do_stay_strings() {
        // Checks `placeholder::retypes` against the parser itself, over short strings of the
        // characters YAML 1.1 scalars are made of.
        let alphabet: Vec<char> = "0189aeEfFnNoOsStTuUlLyYxXbB._-+:~<=/ ".chars().collect();
        let mut strings: Vec<String> = Vec::new();
        for a in &alphabet {
            strings.push(a.to_string());
            for b in &alphabet {
                strings.push(format!("{a}{b}"));
                for c in &alphabet {
                    strings.push(format!("{a}{b}{c}"));
                }
            }
        }
        for word in [
            "yes", "no", "true", "false", "on", "off", "null", "nan", "inf", "infinity", "none",
        ] {
            strings.push(word.to_uppercase());
            strings.push(format!("{}{}", word[..1].to_uppercase(), &word[1..]));
        }
        for s in strings {
            if inert::why_not_inert(&s).is_some() || placeholder::retypes(&s) {
                continue;
            }
            let parsed = crate::engine::yaml::documents(&format!("k: {s}\n"));
            assert_eq!(
                parsed.map(|mut d| d.remove(0)),
                Ok(serde_json::json!({"k": s})),
                "{s:?} is written raw but does not read back as that string"
            );
        }
    }

    #[test]
    fn undefined_variables_are_errors() {
        let err = Renderer::default().eval("t", "spec.missing.deeper", &to_value(&serde_json::json!({"spec": {}})));
        assert!(err.expect_err("strict").message.contains("undefined"));
    }
}
