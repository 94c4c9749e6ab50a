//! Compiled expressions of one rule set: a rule's `when`, conditions and status expressions are
//! compiled on their first evaluation and kept, not compiled again on every reconcile.
//!
//! minijinja's `Expression` borrows its environment, which the renderer owns, so the cache keeps
//! each expression's instructions together with their source (`self_cell`) and evaluates them
//! with minijinja's VM against the environment passed in, as `Expression::eval` does.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, PoisonError, RwLock};

use minijinja::machinery::{CodeGenerator, Instructions, make_string_output, parse_expr};
use minijinja::value::Value;
use minijinja::{AutoEscape, Environment, Error, ErrorKind};

/// Expressions kept at most: a rule set has far fewer; past this an expression is compiled for
/// each evaluation instead of growing the cache.
const MAX_KEPT: usize = 4096;

self_cell::self_cell!(
    /// An expression's source and the instructions compiled from it.
    struct Compiled {
        owner: String,

        #[covariant]
        dependent: Instructions,
    }
);

/// Compiled expressions by source.
#[derive(Default)]
pub(crate) struct Expressions {
    kept: RwLock<HashMap<String, Arc<Compiled>>>,
}

impl std::fmt::Debug for Expressions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.kept.read().unwrap_or_else(PoisonError::into_inner).len();
        f.debug_struct("Expressions").field("kept", &kept).finish()
    }
}

impl Expressions {
    /// Evaluates `expression` against `context` in `env`, compiling it on first use.
    pub(crate) fn eval(&self, env: &Environment<'static>, expression: &str, context: &Value) -> Result<Value, Error> {
        let compiled = self.compiled(expression)?;
        let mut discarded = String::new();
        let (value, _) = minijinja::machinery::eval(
            env,
            compiled.borrow_dependent(),
            context.clone(),
            &BTreeMap::new(),
            &mut make_string_output(&mut discarded),
            AutoEscape::None,
        )?;
        value.ok_or_else(|| Error::new(ErrorKind::InvalidOperation, "the expression left no value"))
    }

    fn compiled(&self, expression: &str) -> Result<Arc<Compiled>, Error> {
        if let Some(compiled) = self.kept.read().unwrap_or_else(PoisonError::into_inner).get(expression) {
            return Ok(compiled.clone());
        }
        let compiled = Arc::new(Compiled::try_new(expression.to_owned(), |source| {
            parse_expr(source).map(|ast| {
                let mut generator = CodeGenerator::new("<expression>", source);
                generator.compile_expr(&ast);
                generator.finish().0
            })
        })?);
        let mut kept = self.kept.write().unwrap_or_else(PoisonError::into_inner);
        if kept.len() < MAX_KEPT {
            kept.insert(expression.to_owned(), compiled.clone());
        }
        Ok(compiled)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env() -> Environment<'static> {
        let mut env = Environment::new();
        env.set_undefined_behavior(minijinja::UndefinedBehavior::Strict);
        env
    }

    #[test]
    fn evaluates_like_a_compiled_expression_and_keeps_it() {
        let (env, expressions) = (env(), Expressions::default());
        let context = crate::engine::template::to_value(&serde_json::json!({"spec": {"replicas": 3}}));
        for _ in 0..2 {
            let value = expressions
                .eval(&env, "spec.replicas * 2 > 5", &context)
                .expect("evaluates");
            let direct = env
                .compile_expression("spec.replicas * 2 > 5")
                .and_then(|e| e.eval(&context))
                .expect("evaluates");
            assert_eq!(value, direct);
            assert_eq!(value, Value::from(true));
        }
        assert_eq!(expressions.kept.read().expect("lock").len(), 1);
    }

    #[test]
    fn errors_are_minijinja_s_own() {
        let (env, expressions) = (env(), Expressions::default());
        let context = crate::engine::template::to_value(&serde_json::json!({}));
        let err = expressions
            .eval(&env, "spec.missing", &context)
            .expect_err("strict undefined");
        let direct = env
            .compile_expression("spec.missing")
            .and_then(|e| e.eval(&context))
            .expect_err("strict undefined");
        assert_eq!(err.kind(), direct.kind());
        assert_eq!(err.line(), direct.line());
        let syntax = expressions.eval(&env, "spec.(", &context).expect_err("does not parse");
        assert_eq!(syntax.kind(), ErrorKind::SyntaxError);
        let kept = expressions.kept.read().expect("lock");
        assert_eq!(kept.keys().collect::<Vec<_>>(), ["spec.missing"], "{syntax}");
    }
}
