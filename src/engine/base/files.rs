//! Reading a directory tree of source files (rules, templates, CRDs): walked recursively,
//! following symlinks and skipping dot entries, so a mounted ConfigMap (files linked through
//! `..data`) reads like a plain folder.

use std::fs;
use std::path::{Path, PathBuf};

use crate::engine::diagnostic::{Diagnostic, SourceLocation};

/// Reads every file under `dir` (following links, skipping dot entries), sorted by name, as
/// `(name relative to dir with '/' separators, path, text)`. A link that loops back to a directory
/// above it is a located error, not a walk without end.
pub(crate) fn read_tree(
    dir: &Path,
    wanted: impl Fn(&Path) -> bool,
    problems: &mut Vec<Diagnostic>,
) -> Vec<(String, PathBuf, String)> {
    let mut files = Vec::new();
    // Dot entries are skipped: a mounted ConfigMap keeps its files twice, under `..data`.
    let hidden = |entry: &walkdir::DirEntry| entry.depth() > 0 && entry.file_name().to_string_lossy().starts_with('.');
    for entry in walkdir::WalkDir::new(dir)
        .follow_links(true)
        .into_iter()
        .filter_entry(|entry| !hidden(entry))
    {
        let entry = match entry {
            Ok(entry) => entry,
            Err(e) => {
                problems.push(walk_diagnostic(dir, &e));
                continue;
            }
        };
        let path = entry.path();
        if entry.file_type().is_dir() || !wanted(path) {
            continue;
        }
        match fs::read_to_string(path) {
            Ok(text) => {
                let name = path
                    .strip_prefix(dir)
                    .unwrap_or(path)
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy())
                    .collect::<Vec<_>>()
                    .join("/");
                files.push((name, path.to_owned(), text));
            }
            Err(e) => problems.push(Diagnostic::new(
                SourceLocation::new(path, 0, 0),
                format!("cannot read file: {e}"),
            )),
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files
}

/// Where a walk failed and why: a link loop names the link and the directory it returns to.
fn walk_diagnostic(dir: &Path, e: &walkdir::Error) -> Diagnostic {
    let at = e.path().unwrap_or(dir);
    let message = match e.loop_ancestor() {
        Some(ancestor) => format!(
            "a symbolic link loop: this leads back to {}, a directory above it",
            ancestor.display()
        ),
        None => match e.io_error() {
            Some(io) if e.depth() == 0 => format!("cannot read directory: {io}"),
            Some(io) => format!("cannot read: {io}"),
            None => format!("cannot read: {e}"),
        },
    };
    Diagnostic::new(SourceLocation::new(at, 0, 0), message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_loop_under_the_rules_is_a_located_error_and_the_other_files_are_read() {
        let dir = tempfile::tempdir().expect("tempdir");
        fs::create_dir_all(dir.path().join("team")).expect("mkdir");
        fs::write(dir.path().join("team/a.yaml"), "a").expect("write");
        std::os::unix::fs::symlink(dir.path(), dir.path().join("team/loop")).expect("symlink");
        let mut problems = Vec::new();
        let files = read_tree(dir.path(), |_| true, &mut problems);
        assert_eq!(files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), ["team/a.yaml"]);
        assert_eq!(problems.len(), 1, "{problems:?}");
        let text = problems[0].to_string();
        assert!(
            text.contains("team/loop") && text.contains("symbolic link loop"),
            "{text}"
        );
    }

    #[test]
    fn dot_entries_are_skipped_and_linked_directories_followed_as_in_a_mounted_config_map() {
        let dir = tempfile::tempdir().expect("tempdir");
        let data = dir.path().join("..2026_12_01");
        fs::create_dir_all(&data).expect("mkdir");
        fs::write(data.join("db.yaml"), "x").expect("write");
        std::os::unix::fs::symlink(&data, dir.path().join("..data")).expect("symlink");
        std::os::unix::fs::symlink("..data/db.yaml", dir.path().join("db.yaml")).expect("symlink");
        let mut problems = Vec::new();
        let files = read_tree(dir.path(), |_| true, &mut problems);
        assert!(problems.is_empty(), "{problems:?}");
        assert_eq!(files.iter().map(|f| f.0.as_str()).collect::<Vec<_>>(), ["db.yaml"]);
    }
}
