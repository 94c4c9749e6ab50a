//! Filters and tests a template names that its environment does not have: minijinja looks them
//! up only when the line runs, so `{{ spec | tojsn }}` would load, pass `ruleop check` and fail
//! in production on the first parent that reaches it. Found here from the compiled
//! instructions, at load time, with their line.

use std::sync::Arc;

use minijinja::machinery::{CompiledTemplate, Instruction, TemplateConfig};
use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Environment, ErrorKind, context};

/// A filter or test the template calls that `env` does not define.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnknownCallee {
    /// `filter` or `test`.
    pub what: &'static str,
    /// Its name as written.
    pub name: String,
    /// 1-based line in the source.
    pub line: Option<usize>,
}

/// The unknown filters and tests of `source` (a template), in source order, each once. A
/// source that does not parse has none here: compiling it reports that.
pub(crate) fn unknown_callees(env: &Environment<'_>, name: &str, source: &str) -> Vec<UnknownCallee> {
    let config = TemplateConfig {
        syntax_config: SyntaxConfig::default(),
        default_auto_escape: Arc::new(|_| AutoEscape::None),
    };
    let Ok(compiled) = CompiledTemplate::new(name, source, &config) else {
        return Vec::new();
    };
    let mut found: Vec<UnknownCallee> = Vec::new();
    for instructions in std::iter::once(&compiled.instructions).chain(compiled.blocks.values()) {
        let mut index = 0;
        while let Some(instruction) = instructions.get(index) {
            let callee = match instruction {
                Instruction::ApplyFilter(name, ..) if !has_filter(env, name) => Some(("filter", *name)),
                Instruction::PerformTest(name, ..) if !has_test(env, name) => Some(("test", *name)),
                _ => None,
            };
            if let Some((what, name)) = callee
                && !found.iter().any(|f| f.what == what && f.name == name)
            {
                found.push(UnknownCallee {
                    what,
                    name: name.to_owned(),
                    line: instructions.get_line(index),
                });
            }
            index += 1;
        }
    }
    found
}

/// The unknown filters and tests of an expression (`when`, `forEach`, `{value}`).
pub(crate) fn unknown_callees_of_expression(env: &Environment<'_>, name: &str, expression: &str) -> Vec<UnknownCallee> {
    unknown_callees(env, name, &format!("{{{{ ({expression}) }}}}"))
}

/// Whether `env` has the filter: applying it to `none` fails for any reason but its absence.
fn has_filter(env: &Environment<'_>, name: &str) -> bool {
    probe(env, &format!("x | {name}"), ErrorKind::UnknownFilter)
}

/// Whether `env` has the test, probed as [`has_filter`] is.
fn has_test(env: &Environment<'_>, name: &str) -> bool {
    probe(env, &format!("x is {name}"), ErrorKind::UnknownTest)
}

fn probe(env: &Environment<'_>, expression: &str, absent: ErrorKind) -> bool {
    match env.compile_expression(expression) {
        Ok(compiled) => !matches!(compiled.eval(context! { x => () }), Err(e) if e.kind() == absent),
        Err(_) => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Environment<'static> {
        let mut env = Environment::new();
        env.add_filter("dig", |v: minijinja::Value| v);
        env
    }

    #[test]
    fn a_misspelt_filter_or_test_is_found_with_its_line_and_known_ones_are_not() {
        let source = "a: {{ spec | tojson }}\nb: {{ spec | tojsn }}\n{% if x is defind %}{{ x | dig }}{% endif %}\n{{ y | tojsn }}";
        let found = unknown_callees(&env(), "t.yaml.j2", source);
        assert_eq!(
            found,
            vec![
                UnknownCallee {
                    what: "filter",
                    name: "tojsn".into(),
                    line: Some(2)
                },
                UnknownCallee {
                    what: "test",
                    name: "defind".into(),
                    line: Some(3)
                },
            ]
        );
    }

    #[test]
    fn blocks_and_expressions_are_searched_too() {
        let found = unknown_callees(&env(), "t", "{% block b %}{{ x | nope }}{% endblock %}");
        assert_eq!(found.len(), 1, "{found:?}");
        let found = unknown_callees_of_expression(&env(), "when", "spec.x | lenght > 0");
        assert_eq!(found[0].name, "lenght");
        assert!(unknown_callees_of_expression(&env(), "when", "spec.x | length > 0").is_empty());
    }
}
