//! docs/development/architecture.md names every folder and source file of src/ by purpose: its
//! Layout block has a line for each, so a new file without a word there fails here.

use std::path::{Path, PathBuf};

use walkdir::WalkDir;

/// The Layout lines of the page: each starts with the folder (`src/apply/`) it describes.
fn layout_lines() -> Vec<String> {
    let page = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/development/architecture.md"))
        .expect("read docs/development/architecture.md");
    page.lines()
        .filter(|line| line.starts_with("src/"))
        .map(str::to_owned)
        .collect()
}

/// Whether `word` stands in `line` as a whole word (not inside `word_more` or `a_word`).
fn has_word(line: &str, word: &str) -> bool {
    let is_word_char = |c: char| c.is_ascii_alphanumeric() || c == '_';
    line.match_indices(word).any(|(at, _)| {
        let before = line[..at].chars().next_back();
        let after = line[at + word.len()..].chars().next();
        !before.is_some_and(is_word_char) && !after.is_some_and(is_word_char)
    })
}

/// Whether a Layout line names `folder` (`src/a/b/`) and, if given, `stem` in it: a line that
/// starts with the folder, or with one of its ancestors and names the folder as `b/`.
fn named(lines: &[String], folder: &str, stem: Option<&str>) -> bool {
    let parts: Vec<&str> = folder.trim_end_matches('/').split('/').collect();
    let own = format!("{}/", parts.last().copied().unwrap_or_default());
    lines.iter().any(|line| {
        (2..=parts.len()).rev().any(|depth| {
            let ancestor = format!("{}/", parts[..depth].join("/"));
            line.starts_with(&ancestor)
                && (depth == parts.len() || line.contains(&own))
                && stem.is_none_or(|stem| has_word(line, stem))
        })
    })
}

#[test]
fn every_source_folder_and_file_is_named_in_the_architecture_page() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let lines = layout_lines();
    let mut missing = Vec::new();
    for entry in WalkDir::new(root.join("src")).sort_by_file_name() {
        let entry = entry.expect("walk src/");
        let relative = entry.path().strip_prefix(&root).expect("under the root");
        let text = relative.to_string_lossy().replace('\\', "/");
        if entry.file_type().is_dir() {
            let has_code = std::fs::read_dir(entry.path())
                .expect("read a folder")
                .flatten()
                .any(|f| {
                    let name = f.file_name();
                    let name = name.to_string_lossy();
                    name.ends_with(".rs") && name != "tests.rs"
                });
            if text != "src" && has_code && !named(&lines, &format!("{text}/"), None) {
                missing.push(format!("{text}/"));
            }
            continue;
        }
        let name = entry.file_name().to_string_lossy();
        let Some(stem) = name.strip_suffix(".rs") else { continue };
        if ["lib", "main", "mod", "tests"].contains(&stem) {
            continue;
        }
        let folder = text.strip_suffix(name.as_ref()).unwrap_or_default();
        if !named(&lines, folder, Some(stem)) {
            missing.push(text);
        }
    }
    assert!(
        missing.is_empty(),
        "not named in the Layout of docs/development/architecture.md:\n{}",
        missing.join("\n")
    );
}

#[test]
fn a_file_is_named_by_its_own_folder_or_an_ancestor_that_names_the_folder() {
    let lines = [
        "src/apply/      children.rs (apply)".to_owned(),
        "src/engine/rules/  validate/ (rule, scope)".to_owned(),
    ];
    assert!(named(&lines, "src/apply/", Some("children")));
    assert!(!named(&lines, "src/apply/", Some("child")));
    assert!(named(&lines, "src/engine/rules/validate/", Some("scope")));
    assert!(!named(&lines, "src/engine/rules/validate/", Some("children")));
    assert!(!named(&lines, "src/cache/", Some("children")));
}
