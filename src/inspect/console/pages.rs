//! The console's HTML: minijinja templates (`pages/*.html`, compiled into the binary, every
//! value HTML-escaped) rendered from the same values the JSON API serves.

use std::sync::LazyLock;

use axum::http::StatusCode;
use minijinja::{Environment, context};

use super::{Failure, ParentsPage};
use crate::inspect::status::Status;
use crate::inspect::trace::model::Trace;

/// The templates, by name; `.html` names turn on HTML escaping.
static PAGES: LazyLock<Environment<'static>> = LazyLock::new(|| {
    let mut env = Environment::new();
    for (name, source) in [
        ("layout.html", include_str!("pages/layout.html")),
        ("home.html", include_str!("pages/home.html")),
        ("parents.html", include_str!("pages/parents.html")),
        ("trace.html", include_str!("pages/trace.html")),
        ("error.html", include_str!("pages/error.html")),
    ] {
        // The templates are ours and compiled in; a syntax error fails the unit tests below.
        if let Err(e) = env.add_template(name, source) {
            tracing::error!(error = %e, name, "a console template does not compile");
        }
    }
    env
});

fn render(name: &str, ctx: minijinja::Value) -> Result<String, Failure> {
    PAGES
        .get_template(name)
        .and_then(|t| t.render(ctx))
        .map_err(|e| Failure(StatusCode::INTERNAL_SERVER_ERROR, format!("rendering {name}: {e:#}")))
}

/// Rules, the last reload and the failing parents (of `namespace`, when not empty).
pub(crate) fn home(status: &Status, namespace: &str) -> Result<String, Failure> {
    render(
        "home.html",
        context! { status => minijinja::Value::from(minijinja::value::Serde(status)), namespace },
    )
}

/// One page of a rule's parents.
pub(crate) fn parents(page: &ParentsPage) -> Result<String, Failure> {
    render(
        "parents.html",
        context! { page => minijinja::Value::from(minijinja::value::Serde(page)) },
    )
}

/// One parent's trace.
pub(crate) fn trace(trace: &Trace) -> Result<String, Failure> {
    render(
        "trace.html",
        context! { trace => minijinja::Value::from(minijinja::value::Serde(trace)) },
    )
}

/// A page saying why a request failed.
pub(crate) fn error(code: StatusCode, why: &str) -> String {
    render("error.html", context! { code => code.as_u16(), why }).unwrap_or_else(|Failure(_, e)| format!("{code}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_page_renders_and_escapes_what_it_shows() {
        let page = ParentsPage {
            rule: "database".to_owned(),
            watches: "myorg.io/v1 Database".to_owned(),
            namespace: String::new(),
            ready: String::new(),
            page: 1,
            pages: 3,
            total: 120,
            items: vec![crate::inspect::console::ParentRow {
                namespace: "shop".to_owned(),
                name: "orders".to_owned(),
                ready: "False".to_owned(),
                reason: "RenderFailed".to_owned(),
                message: "<script>alert(1)</script> at database/statefulset.yaml.j2:12".to_owned(),
                since: String::new(),
            }],
        };
        let html = parents(&page).expect("renders");
        assert!(html.contains("&lt;script&gt;alert(1)&lt;&#x2f;script&gt;"), "{html}");
        assert!(!html.contains("<script>alert"), "{html}");
        assert!(html.contains(r#"data-parent="shop/orders""#), "{html}");
        assert!(html.contains("page 1 of 3"), "{html}");
        // minijinja escapes `/` too; the browser reads `/rules/database?namespace=&ready=&page=2`.
        assert!(
            html.contains(r#"id="next" href="&#x2f;rules&#x2f;database?namespace=&amp;ready=&amp;page=2""#),
            "{html}"
        );
        let home = home(&Status::default(), "").expect("renders");
        assert!(home.contains("<h1>"), "{home}");
        assert!(error(StatusCode::NOT_FOUND, "no rule <x>").contains("no rule &lt;x&gt;"));
    }
}
