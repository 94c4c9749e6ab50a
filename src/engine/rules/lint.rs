//! Warnings for rules that load but are likely to fail at run time: `ruleop check` prints them.
//!
//! - Reading into `children.<id>` (`children.db.status.x`) in a `when` or status expression.
//!   Until that child exists the access is undefined, which strict mode makes an error: a child's
//!   `when` then fails the whole plan, and a status condition turns `Unknown`.
//!   `children | dig("db.status.x", default)` or a `children.db is defined` guard is safe.
//! - A dotted `dig("annotations.example.com/key")`: it splits the key at its dots and never
//!   finds it; a list path (`dig(["annotations", "example.com/key"])`) does.
//! - An http action URL whose host comes from the parent.

use std::path::Path;

use crate::engine::diagnostic::SourceLocation;
use crate::engine::rules::model::{FieldSource, Located};
use crate::engine::rules::{Rule, RuleSet};

/// One warning line per unguarded access, with its rule file location and a hint.
pub(crate) fn warnings(set: &RuleSet) -> Vec<String> {
    let mut out = Vec::new();
    for rule in &set.rules {
        rule_warnings(rule, &mut out);
    }
    out
}

fn rule_warnings(rule: &Rule, out: &mut Vec<String>) {
    let file = rule.file.as_path();
    let spec = &rule.spec;
    for child in &spec.children {
        if let Some(when) = &child.when {
            let what = format!("children[{}].when", child.id.value);
            warn_expression(file, when, &what, Kind::Expression, out);
        }
    }
    for action in &spec.actions {
        if let Some(when) = &action.when {
            let what = format!("actions[{}].when", action.id.value);
            warn_expression(file, when, &what, Kind::Expression, out);
        }
        if let Some(http) = &action.http {
            warn_url_host(file, &http.url, &format!("actions[{}].http.url", action.id.value), out);
        }
    }
    for (field, source) in &spec.status.fields {
        let (text, kind) = match &source.value {
            FieldSource::Template(text) => (text, Kind::Template),
            FieldSource::Expression(expression) => (&expression.value, Kind::Expression),
            FieldSource::FromChild(_) => continue,
        };
        let located = Located::new(text.clone(), source.referenced, source.defined);
        warn_expression(file, &located, &format!("status.fields.{field}"), kind, out);
    }
    for condition in &spec.status.conditions {
        let type_ = &condition.type_;
        warn_expression(
            file,
            &condition.when,
            &format!("status.conditions[{type_}].when"),
            Kind::Expression,
            out,
        );
        for (what, text) in [
            ("reason", &condition.reason),
            ("falseReason", &condition.false_reason),
            ("message", &condition.message),
        ] {
            if let Some(text) = text {
                let label = format!("status.conditions[{type_}].{what}");
                warn_expression(file, text, &label, Kind::Template, out);
            }
        }
    }
}

#[derive(Clone, Copy)]
enum Kind {
    /// A bare Jinja expression (`when`).
    Expression,
    /// A template string: only the code inside `{{ }}` and `{% %}` counts.
    Template,
}

fn warn_expression(file: &Path, source: &Located<String>, what: &str, kind: Kind, out: &mut Vec<String>) {
    let code = match kind {
        Kind::Expression => source.value.clone(),
        Kind::Template => template_code(&source.value),
    };
    let location = SourceLocation::from_span(file, &source.referenced);
    for path in dig_paths_with_slashes(&code) {
        out.push(format!(
            "{location}: warning: {what}: dig(\"{path}\") splits at every `.`, so a key with a dot (an annotation or label name such as `kro.run/reconcile`) is never found and the default is used\n  hint: give the keys as a list: dig([\"annotations\", \"example.com/key\"], <default>)"
        ));
    }
    for access in unguarded_accesses(&code) {
        out.push(format!(
            "{location}: warning: {what}: `children.{}` is undefined until child {:?} exists, which fails this expression\n  hint: write `children | dig(\"{}\", <default>)`, or guard it with `children.{} is defined and ...`",
            access.path, access.id, access.path, access.id
        ));
    }
}

/// Parent fields tenants write: a URL whose host comes from them goes where the tenant says.
const PARENT_ROOTS: [&str; 4] = ["spec", "metadata", "status", "object"];

fn warn_url_host(file: &Path, url: &Located<String>, what: &str, out: &mut Vec<String>) {
    let code = without_strings(&template_code(url_host_part(&url.value)));
    let Some(root) = code
        .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'))
        .filter_map(|token| token.split('.').next())
        .find(|name| PARENT_ROOTS.contains(name))
    else {
        return;
    };
    let location = SourceLocation::from_span(file, &url.referenced);
    out.push(format!(
        "{location}: warning: {what}: the url's scheme, host or port depends on `{root}`, which the parent's author writes: they choose among allowedHosts (and probe them)\n  hint: write `https://host/` literally and template only the path or query, e.g. `https://hooks.example.com/db/{{{{ metadata.name | urlencode }}}}`"
    ));
}

/// The part of a url template that decides where it goes: everything up to the first `/`, `?`
/// or `#` after a literal `scheme://` (all of it when `://` is not literal), tags included.
fn url_host_part(url: &str) -> &str {
    let bytes = url.as_bytes();
    let mut authority = false;
    let mut i = 0;
    while i < bytes.len() {
        let rest = &bytes[i..];
        let close: Option<&[u8]> = if rest.starts_with(b"{{") {
            Some(b"}}")
        } else if rest.starts_with(b"{%") {
            Some(b"%}")
        } else if rest.starts_with(b"{#") {
            Some(b"#}")
        } else {
            None
        };
        if let Some(close) = close {
            i = bytes[i + 2..]
                .windows(2)
                .position(|w| w == close)
                .map_or(bytes.len(), |end| i + 2 + end + 2);
            continue;
        }
        if !authority && rest.starts_with(b"://") {
            authority = true;
            i += 3;
            continue;
        }
        if authority && matches!(bytes[i], b'/' | b'?' | b'#') {
            return &url[..i];
        }
        i += 1;
    }
    url
}

/// The code parts of a template (inside `{{ }}` and `{% %}`), blank elsewhere.
fn template_code(text: &str) -> String {
    let mut code = String::new();
    let mut rest = text;
    while let Some(start) = rest.find(['{']) {
        let after = &rest[start..];
        let close = if after.starts_with("{{") {
            "}}"
        } else if after.starts_with("{%") {
            "%}"
        } else {
            rest = &rest[start + 1..];
            continue;
        };
        let body = &after[2..];
        let end = body.find(close).unwrap_or(body.len());
        code.push_str(&body[..end]);
        code.push(' ');
        rest = body.get(end + 2..).unwrap_or_default();
    }
    code
}

/// The literal dotted paths of `dig("…")` calls that hold a `/`: a prefixed key (`kro.run/x`),
/// which the dotted form can never reach because it splits the prefix at its dots.
fn dig_paths_with_slashes(code: &str) -> Vec<String> {
    let bare = without_strings(code);
    let bytes = bare.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(pos) = bare[from..].find("dig(") {
        let at = from + pos;
        from = at + "dig(".len();
        if at > 0 && is_ident(bytes[at - 1]) {
            continue;
        }
        let open = from + (bare[from..].len() - bare[from..].trim_start().len());
        let Some(quote) = bare[open..].chars().next().filter(|c| *c == '"' || *c == '\'') else {
            continue;
        };
        let Some(close) = bare[open + 1..].find(quote).map(|i| open + 1 + i) else {
            continue;
        };
        let literal = &code[open + 1..close];
        if literal.contains('/') {
            found.push(literal.to_owned());
        }
    }
    found
}

/// A read into a child: `children.<id>.<more>` with `path` = `<id>.<more>`.
#[derive(Debug, PartialEq, Eq)]
struct Access {
    id: String,
    path: String,
}

/// Every `children.<id>.…` / `children.<id>[…]` read whose id the code does not guard with
/// `children.<id> is defined` or `'<id>' in children`. String literals are skipped.
fn unguarded_accesses(code: &str) -> Vec<Access> {
    let bare = without_strings(code);
    let mut found: Vec<Access> = Vec::new();
    let bytes = bare.as_bytes();
    let mut from = 0;
    while let Some(pos) = bare[from..].find("children.") {
        let at = from + pos;
        from = at + "children.".len();
        if at > 0 && (is_ident(bytes[at - 1]) || bytes[at - 1] == b'.') {
            continue;
        }
        let chain_end = bare[from..]
            .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == '-' || c == '.'))
            .map_or(bare.len(), |i| from + i);
        let chain = bare[from..chain_end].trim_end_matches('.');
        let (id, more) = chain.split_once('.').unwrap_or((chain, ""));
        let indexed = bare[chain_end..].starts_with('[');
        // `children.<id>.items()`: a method of a forEach child's map, which always exists.
        let method_call = !more.is_empty() && !more.contains('.') && bare[chain_end..].starts_with('(');
        if id.is_empty() || (more.is_empty() && !indexed) || method_call {
            continue;
        }
        if is_guarded(&bare, code, id) || found.iter().any(|a| a.path == chain) {
            continue;
        }
        found.push(Access {
            id: id.to_owned(),
            path: if more.is_empty() {
                id.to_owned()
            } else {
                chain.to_owned()
            },
        });
    }
    found
}

fn is_guarded(bare: &str, code: &str, id: &str) -> bool {
    let squeezed: String = bare.split_whitespace().collect::<Vec<_>>().join(" ");
    squeezed.contains(&format!("children.{id} is defined"))
        || squeezed.contains(&format!("children.{id} is not undefined"))
        || code.contains(&format!("'{id}' in children"))
        || code.contains(&format!("\"{id}\" in children"))
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// `code` with the contents of string literals blanked out (same length).
fn without_strings(code: &str) -> String {
    let mut out = String::with_capacity(code.len());
    let mut quote: Option<char> = None;
    let mut escaped = false;
    for c in code.chars() {
        match quote {
            Some(q) => {
                if escaped {
                    escaped = false;
                } else if c == '\\' {
                    escaped = true;
                } else if c == q {
                    quote = None;
                    out.push(c);
                    continue;
                }
                out.extend(std::iter::repeat_n(' ', c.len_utf8()));
            }
            None => {
                if c == '\'' || c == '"' {
                    quote = Some(c);
                }
                out.push(c);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_dotted_dig_path_with_a_prefixed_key_is_found_and_a_list_path_is_not() {
        let code = r#"metadata | dig("annotations.kro.run/reconcile", "") ~ x | dig('a.b') ~ y | dig(["annotations", "a.b/c"])"#;
        assert_eq!(
            super::dig_paths_with_slashes(code),
            vec!["annotations.kro.run/reconcile"]
        );
        assert!(super::dig_paths_with_slashes("undig('a/b')").is_empty());
    }

    use super::*;

    fn paths(code: &str) -> Vec<String> {
        unguarded_accesses(code).into_iter().map(|a| a.path).collect()
    }

    #[test]
    fn a_read_into_a_child_is_found() {
        assert_eq!(
            paths("(children.deployment.status.availableReplicas | default(0)) >= spec.replicas"),
            ["deployment.status.availableReplicas"]
        );
        assert_eq!(paths("children.db['status']"), ["db"]);
    }

    #[test]
    fn guarded_and_safe_reads_are_not() {
        assert!(paths("children.db is defined and children.db.status.ready").is_empty());
        assert!(paths("'db' in children and children.db.status.ready").is_empty());
        assert!(paths("children | dig('db.status.ready', false)").is_empty());
        assert!(paths("children.db is defined").is_empty());
        assert!(paths("object.children.db.x").is_empty());
        assert!(paths("'children.db.x' == spec.name").is_empty());
        assert!(paths("children.shards.items() | length > 0").is_empty());
    }

    fn url_warnings(url: &str) -> Vec<String> {
        let mut out = Vec::new();
        let located = Located::new(
            url.to_owned(),
            serde_saphyr::Location::UNKNOWN,
            serde_saphyr::Location::UNKNOWN,
        );
        warn_url_host(Path::new("r.yaml"), &located, "actions[notify].http.url", &mut out);
        out
    }

    #[test]
    fn a_url_whose_host_comes_from_the_parent_is_warned_about() {
        for url in [
            "{{ spec.webhook }}",
            "https://{{ spec.host }}/hook",
            "https://hooks.example.com{{ spec.path }}",
            "{{ metadata.annotations['hook'] }}/x",
            "https://hooks.example.com:{{ status.port }}/",
            "{{ object | dig('spec.url', '') }}",
        ] {
            assert_eq!(url_warnings(url).len(), 1, "{url}");
        }
    }

    #[test]
    fn a_literal_host_with_templated_path_or_query_is_not() {
        for url in [
            "https://hooks.example.com/db/{{ metadata.name | urlencode }}",
            "https://hooks.example.com?db={{ spec.name }}",
            "https://{{ rule.name }}.example.com/",
            "http://127.0.0.1:8080/hook#{{ spec.x }}",
            "https://hooks.example.com/{{ 'spec' }}",
        ] {
            assert!(url_warnings(url).is_empty(), "{url}: {:?}", url_warnings(url));
        }
    }

    #[test]
    fn only_template_code_counts() {
        assert_eq!(template_code("children.x.y {{ a }} b {% if c %}d"), " a   if c  ");
        assert_eq!(
            paths(&template_code("{{ children.sts.status.readyReplicas }} ready")),
            ["sts.status.readyReplicas"]
        );
    }
}
