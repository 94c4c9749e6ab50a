//! Typed reads: the parent fields a template or expression reads (`spec.storage.size`,
//! `spec | dig("backup.schedule")`, `item.name` of a `forEach`, a `{% for %}` or `{% set %}`
//! alias of either), found in minijinja's compiled instructions with their line, and resolved
//! against the parent's schema. A name the schema does not have is reported with the nearest
//! valid ones, before any parent reaches that line.

use std::collections::HashMap;
use std::sync::Arc;

use minijinja::machinery::{CompiledTemplate, Instruction, Instructions, TemplateConfig};
use minijinja::syntax::SyntaxConfig;
use minijinja::{AutoEscape, Value};

use crate::engine::schema::{OBJECT_META_FIELDS, Schema, Step, did_you_mean};

/// One step of a read path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Segment {
    /// `.name`, `["name"]` or a `dig` key.
    Field(String),
    /// `[0]`, a `dig` index, or the items of a `for` loop.
    Item,
}

/// A path read from one of the context's variables.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Read {
    /// The variable: `spec`, `status`, `metadata`, `object` or `item`.
    pub root: String,
    /// What is read below it.
    pub path: Vec<Segment>,
    /// 1-based line in the source.
    pub line: Option<usize>,
}

impl Read {
    /// `spec.storage.size`, `item.users[]`.
    pub(crate) fn dotted(&self) -> String {
        let mut text = self.root.clone();
        for segment in &self.path {
            match segment {
                Segment::Field(name) => {
                    text.push('.');
                    text.push_str(name);
                }
                Segment::Item => text.push_str("[]"),
            }
        }
        text
    }
}

/// The context variables whose reads are typed.
const ROOTS: &[&str] = &["spec", "status", "metadata", "object", "item"];

/// Every typed read of `source`, an object or text template. A source that does not compile
/// has none (compiling it reports that).
pub(crate) fn of_template(name: &str, source: &str) -> Vec<Read> {
    let config = TemplateConfig {
        syntax_config: SyntaxConfig::default(),
        default_auto_escape: Arc::new(|_| AutoEscape::None),
    };
    let Ok(compiled) = CompiledTemplate::new(name, source, &config) else {
        return Vec::new();
    };
    let mut reads = Vec::new();
    for instructions in std::iter::once(&compiled.instructions).chain(compiled.blocks.values()) {
        collect(instructions, &mut reads);
    }
    reads
}

/// Every typed read of an expression (`when`, `forEach`, `readyWhen`...).
pub(crate) fn of_expression(name: &str, expression: &str) -> Vec<Read> {
    of_template(name, &format!("{{{{ ({expression}) }}}}"))
}

/// The path an expression reads when it is that path alone, maybe through a `dig` and filters
/// that keep the value (`spec.users`, `spec | dig("users", [])`, `spec.users | default([])`):
/// what a `forEach` iterates.
pub(crate) fn sole_path(expression: &str) -> Option<Read> {
    let parts: Vec<&str> = expression.split('|').map(str::trim).collect();
    let is_path = |text: &str| !text.is_empty() && text.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '.');
    if !is_path(parts[0]) {
        return None;
    }
    let mut kept = vec![parts[0]];
    for (i, filter) in parts.iter().enumerate().skip(1) {
        if i == 1 && filter.starts_with("dig(") {
            kept.push(filter);
        } else if !(filter.starts_with("default") || *filter == "list") {
            return None;
        }
    }
    let mut reads = of_expression("forEach", &kept.join(" | "));
    (reads.len() == 1).then(|| reads.remove(0))
}

fn collect(instructions: &Instructions<'_>, reads: &mut Vec<Read>) {
    // Locals bound to a read path (`{% set x = spec.a %}`, `{% for u in spec.users %}`), or
    // to something else (None), which hides a root of the same name.
    let mut aliases: HashMap<&str, Option<(String, Vec<Segment>)>> = HashMap::new();
    let at = |i: usize| instructions.get(i as u32);
    let mut i = 0;
    while let Some(instruction) = at(i) {
        match instruction {
            Instruction::Lookup(name) => {
                let start = match aliases.get(name) {
                    Some(Some((root, path))) => Some((root.clone(), path.clone())),
                    Some(None) => None,
                    None => ROOTS.contains(name).then(|| ((*name).to_owned(), Vec::new())),
                };
                let line = instructions.get_line(i as u32);
                i += 1;
                let Some((root, mut path)) = start else {
                    continue;
                };
                loop {
                    match (at(i), at(i + 1)) {
                        (Some(Instruction::GetAttr(attr)), _) => {
                            path.push(Segment::Field((*attr).to_owned()));
                            i += 1;
                        }
                        (Some(Instruction::LoadConst(key)), Some(Instruction::GetItem)) => {
                            path.push(segment_of(key));
                            i += 2;
                        }
                        _ => break,
                    }
                }
                if let Some(keys) = dig_keys(instructions, i) {
                    path.extend(keys);
                }
                match (at(i), at(i + 1), at(i + 2)) {
                    (Some(Instruction::StoreLocal(local)), ..) => {
                        aliases.insert(local, Some((root.clone(), path.clone())));
                        i += 1;
                    }
                    (
                        Some(Instruction::PushLoop(_)),
                        Some(Instruction::Iterate(_)),
                        Some(Instruction::StoreLocal(local)),
                    ) => {
                        let mut items = path.clone();
                        items.push(Segment::Item);
                        aliases.insert(local, Some((root.clone(), items)));
                        i += 3;
                    }
                    _ => {}
                }
                if !path.is_empty() {
                    reads.push(Read { root, path, line });
                }
            }
            Instruction::StoreLocal(local) => {
                aliases.insert(local, None);
                i += 1;
            }
            _ => i += 1,
        }
    }
}

fn segment_of(key: &Value) -> Segment {
    match key.as_str() {
        Some(text) if text.parse::<usize>().is_err() => Segment::Field(text.to_owned()),
        _ => Segment::Item,
    }
}

/// The keys of a `| dig("a.b", ...)` (or `dig(["a", "b"])`) applied at instruction `i`: its
/// constant arguments, then the filter.
fn dig_keys(instructions: &Instructions<'_>, i: usize) -> Option<Vec<Segment>> {
    let Some(Instruction::LoadConst(keys)) = instructions.get(i as u32) else {
        return None;
    };
    let mut next = i + 1;
    while let Some(Instruction::LoadConst(_)) = instructions.get(next as u32) {
        next += 1;
    }
    let Some(Instruction::ApplyFilter("dig", ..)) = instructions.get(next as u32) else {
        return None;
    };
    let keys: Vec<String> = match keys.as_str() {
        Some(dotted) => dotted.split('.').map(str::to_owned).collect(),
        None => keys.try_iter().ok()?.map(|k| k.to_string()).collect(),
    };
    Some(keys.iter().map(|k| segment_of(&Value::from(k.as_str()))).collect())
}

/// A read that leaves the schema: the path up to the unknown name, the name, and the names the
/// schema has there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct UnknownField {
    /// The known part, e.g. `spec.storage`.
    pub at: String,
    /// The name that is not there.
    pub name: String,
    /// The nearest valid names, or the ones there are.
    pub hint: String,
}

/// What the roots of a parent's context are typed by.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Typing<'a> {
    /// The parent's whole schema (`spec`, `status`).
    pub parent: &'a Schema,
    /// The schema of `item`, when the template belongs to a `forEach` over a typed list.
    pub item: Option<&'a Schema>,
    /// The schema of `object`: the parent's, except in a `readyWhen` (the observed child) or
    /// a `waitFor` (the created object), where it is that kind's when known.
    pub object: Option<&'a Schema>,
}

/// Resolves `read` against the schemas; `None` when every name is known (or the walk reaches
/// a part that is not checked).
pub(crate) fn check(read: &Read, typing: Typing<'_>) -> Option<UnknownField> {
    let mut segments = read.path.iter();
    let mut at = read.root.clone();
    let mut schema = match read.root.as_str() {
        "spec" | "status" => field(typing.parent, &read.root)?,
        "item" => typing.item?,
        "metadata" => return check_metadata(read),
        "object" => match segments.next()? {
            Segment::Field(name) if name == "metadata" => {
                let rest = Read {
                    root: "metadata".into(),
                    path: read.path[1..].to_vec(),
                    line: read.line,
                };
                return check_metadata(&rest).map(|mut u| {
                    u.at = format!("object.{}", u.at);
                    u
                });
            }
            Segment::Field(name) if matches!(name.as_str(), "apiVersion" | "kind") => return None,
            Segment::Field(name) => {
                at = format!("object.{name}");
                match typing.object?.field(name) {
                    Step::Field(schema) => schema,
                    Step::Open => return None,
                    Step::Unknown(mut known) => {
                        known.extend(["apiVersion", "kind", "metadata"]);
                        known.sort_unstable();
                        return Some(unknown("object", name, &known));
                    }
                }
            }
            Segment::Item => return None,
        },
        _ => return None,
    };
    for segment in segments {
        let step = match segment {
            Segment::Field(name) => schema.field(name),
            Segment::Item => schema.item(),
        };
        match step {
            Step::Field(next) => schema = next,
            Step::Open => return None,
            Step::Unknown(known) => {
                let Segment::Field(name) = segment else { return None };
                return Some(unknown(&at, name, &known));
            }
        }
        match segment {
            Segment::Field(name) => {
                at.push('.');
                at.push_str(name);
            }
            Segment::Item => at.push_str("[]"),
        }
    }
    None
}

fn field<'a>(schema: &'a Schema, name: &str) -> Option<&'a Schema> {
    match schema.field(name) {
        Step::Field(schema) => Some(schema),
        _ => None,
    }
}

fn unknown(at: &str, name: &str, known: &[&str]) -> UnknownField {
    UnknownField {
        at: at.to_owned(),
        name: name.to_owned(),
        hint: did_you_mean(name, known),
    }
}

/// `metadata.<name>`: one of ObjectMeta's fields (labels and annotations are maps of anything).
fn check_metadata(read: &Read) -> Option<UnknownField> {
    match read.path.first()? {
        Segment::Field(name) if !OBJECT_META_FIELDS.contains(&name.as_str()) => {
            Some(unknown("metadata", name, OBJECT_META_FIELDS))
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dotted(source: &str) -> Vec<String> {
        of_template("t", source).iter().map(Read::dotted).collect()
    }

    #[test]
    fn attribute_item_and_dig_reads_are_found_with_their_line() {
        let reads = of_template(
            "t",
            "a: {{ spec.storage.size }}\nb: {{ spec['backup'].enabled }}\nc: {{ spec | dig('backup.schedule', '') }}",
        );
        let found: Vec<(String, Option<usize>)> = reads.iter().map(|r| (r.dotted(), r.line)).collect();
        assert_eq!(
            found,
            vec![
                ("spec.storage.size".to_owned(), Some(1)),
                ("spec.backup.enabled".to_owned(), Some(2)),
                ("spec.backup.schedule".to_owned(), Some(3)),
            ]
        );
        assert_eq!(
            dotted("{{ metadata | dig(['annotations', 'a.b/c']) }}"),
            vec!["metadata.annotations.a.b/c"]
        );
        assert_eq!(dotted("{{ spec.users[0].name }}"), vec!["spec.users[].name"]);
    }

    #[test]
    fn loop_and_set_aliases_read_through_to_the_parent() {
        assert_eq!(
            dotted("{% for u in spec.users %}{{ u.name }}{% endfor %}{% set b = spec.backup %}{{ b.size }}"),
            vec!["spec.users", "spec.users[].name", "spec.backup", "spec.backup.size"]
        );
    }

    #[test]
    fn a_local_named_like_a_root_hides_it_and_other_variables_are_not_typed() {
        assert_eq!(
            dotted("{% set spec = {'a': 1} %}{{ spec.a }}{{ children.db.status }}{{ rule.name }}"),
            Vec::<String>::new()
        );
        assert!(of_template("t", "{{ spec.").is_empty());
    }

    #[test]
    fn a_sole_path_is_what_a_for_each_iterates() {
        assert_eq!(sole_path("spec.users").map(|r| r.dotted()), Some("spec.users".into()));
        assert_eq!(
            sole_path("spec.users | default([])").map(|r| r.dotted()),
            Some("spec.users".into())
        );
        assert_eq!(
            sole_path("spec | dig('team.users', []) | list").map(|r| r.dotted()),
            Some("spec.team.users".into())
        );
        assert_eq!(sole_path("spec.users + spec.admins"), None);
        assert_eq!(sole_path("spec.users | map(attribute='name')"), None);
    }

    fn schema() -> Schema {
        Schema::from_yaml(
            "type: object
properties:
  spec:
    type: object
    properties:
      replicas: {type: integer}
      storage: {type: object, properties: {size: {type: string}}}
      users: {type: array, items: {type: object, properties: {name: {type: string}}}}
      extra: {type: object, x-kubernetes-preserve-unknown-fields: true}
  status: {type: object, properties: {phase: {type: string}}}
",
        )
    }

    fn problem(source: &str) -> Option<String> {
        let schema = schema();
        let users = &schema.properties["spec"].properties["users"];
        let typing = Typing {
            parent: &schema,
            item: users.items.as_deref(),
            object: Some(&schema),
        };
        of_template("t", source)
            .iter()
            .find_map(|r| check(r, typing))
            .map(|u| format!("{}: `{}`: {}", u.at, u.name, u.hint))
    }

    #[test]
    fn a_misspelt_read_names_the_nearest_field_and_known_reads_pass() {
        assert_eq!(
            problem("{{ spec.replcias }}"),
            Some("spec: `replcias`: did you mean `replicas`?".into())
        );
        assert_eq!(
            problem("{{ spec.storage.sise }}"),
            Some("spec.storage: `sise`: did you mean `size`?".into())
        );
        assert_eq!(
            problem("{{ item.nmae }}"),
            Some("item: `nmae`: did you mean `name`?".into())
        );
        assert_eq!(
            problem("{% for u in spec.users %}{{ u.nam }}{% endfor %}"),
            Some("spec.users[]: `nam`: did you mean `name`?".into())
        );
        assert_eq!(
            problem("{{ metadata.nmae }}"),
            Some("metadata: `nmae`: did you mean `name`?".into())
        );
        assert_eq!(
            problem("{{ object.sepc }}"),
            Some("object: `sepc`: did you mean `spec`?".into())
        );
        for fine in [
            "{{ spec.replicas }}{{ spec.storage.size }}{{ status.phase }}{{ item.name }}",
            "{{ spec.extra.anything.below }}{{ metadata.labels.app }}{{ object.metadata.name }}{{ object.kind }}",
            "{{ spec.storage.size.upper() }}{{ spec.users[0].name }}",
        ] {
            assert_eq!(problem(fine), None, "{fine}");
        }
    }
}
