//! Every relative link in README.md, docs/**/*.md, examples/**/*.md, bench/README.md and bench/history/*.md resolves: the file (or
//! directory) exists, and a `#anchor` into a Markdown file names one of its headings.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use walkdir::WalkDir;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The Markdown files whose links are checked.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("bench/README.md")];
    let walk = |dir: &str| WalkDir::new(root.join(dir)).sort_by_file_name();
    for entry in walk("docs")
        .into_iter()
        .chain(walk("examples"))
        .chain(walk("bench/history"))
    {
        let entry = entry.expect("walk docs/ and examples/");
        if entry.file_type().is_file() && entry.path().extension().is_some_and(|e| e == "md") {
            files.push(entry.into_path());
        }
    }
    files
}

/// The lines outside fenced code blocks: their 1-based number, the line, and the line with
/// inline code spans blanked out (so that `[a](b)` written as code is not taken for a link).
fn prose_lines(text: &str) -> Vec<(usize, &str, String)> {
    let mut out = Vec::new();
    let mut fence: Option<&str> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        if let Some(open) = fence {
            if trimmed.starts_with(open) {
                fence = None;
            }
            continue;
        }
        if trimmed.starts_with("```") {
            fence = Some("```");
            continue;
        }
        if trimmed.starts_with("~~~") {
            fence = Some("~~~");
            continue;
        }
        out.push((i + 1, line, blank_code_spans(line)));
    }
    out
}

/// `line` with every inline code span (a run of N backticks up to the next run of exactly N)
/// replaced by spaces.
fn blank_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let mut n = 0;
        while i + n < chars.len() && chars[i + n] == '`' {
            n += 1;
        }
        // Find the closing run of exactly n backticks.
        let mut j = i + n;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let mut m = 0;
                while j + m < chars.len() && chars[j + m] == '`' {
                    m += 1;
                }
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                out.extend(std::iter::repeat_n(' ', j + n - i));
                i = j + n;
            }
            None => {
                out.extend(std::iter::repeat_n('`', n));
                i += n;
            }
        }
    }
    out
}

/// The targets of inline links and images (`[text](target)`, `[text](target "title")`).
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let mut depth = 0usize;
        let mut end = None;
        for (k, c) in after.char_indices() {
            match c {
                '(' => depth += 1,
                ')' if depth == 0 => {
                    end = Some(k);
                    break;
                }
                ')' => depth -= 1,
                _ => {}
            }
        }
        let Some(end) = end else { break };
        let target = after[..end].trim();
        let target = target.split_whitespace().next().unwrap_or("");
        let target = target.trim_start_matches('<').trim_end_matches('>');
        targets.push(target.to_string());
        rest = &after[end..];
    }
    targets
}

/// GitHub's anchor for a heading: lower case, punctuation dropped (except `-` and `_`),
/// spaces to `-`; markup characters of the heading text are dropped with the punctuation.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c == ' ' {
                Some('-')
            } else if c.is_alphanumeric() || c == '-' || c == '_' {
                Some(c)
            } else {
                None
            }
        })
        .collect()
}

/// The anchors of a Markdown file's ATX headings, repeated headings numbered as GitHub does.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    for (_, line, _) in prose_lines(text) {
        let trimmed = line.trim_start();
        let hashes = trimmed.chars().take_while(|&c| c == '#').count();
        if hashes == 0 || hashes > 6 || !trimmed[hashes..].starts_with(' ') {
            continue;
        }
        let base = slug(&trimmed[hashes..]);
        let mut anchor = base.clone();
        let mut n = 1;
        while seen.contains(&anchor) {
            anchor = format!("{base}-{n}");
            n += 1;
        }
        seen.insert(anchor);
    }
    seen
}

fn is_external(target: &str) -> bool {
    target.contains("://") || target.starts_with("mailto:")
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = root();
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in documents() {
        let text = std::fs::read_to_string(&file).expect("read a document");
        let shown = file.strip_prefix(&root).unwrap_or(&file).display().to_string();
        for (number, _, line) in prose_lines(&text) {
            for target in link_targets(&line) {
                if target.is_empty() || is_external(&target) {
                    continue;
                }
                checked += 1;
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let dir = file.parent().unwrap_or(Path::new("."));
                let resolved = if path.is_empty() { file.clone() } else { dir.join(path) };
                if !resolved.exists() {
                    problems.push(format!("{shown}:{number}: {target}: no such file"));
                    continue;
                }
                let Some(anchor) = anchor else { continue };
                if resolved.extension().is_none_or(|e| e != "md") {
                    continue;
                }
                let target_text = std::fs::read_to_string(&resolved).expect("read a link target");
                if !anchors(&target_text).contains(anchor) {
                    problems.push(format!("{shown}:{number}: {target}: no heading #{anchor}"));
                }
            }
        }
    }
    assert!(checked > 0, "no relative link found: is the scan broken?");
    assert!(problems.is_empty(), "broken links:\n{}", problems.join("\n"));
}

#[test]
fn anchors_follow_github() {
    assert_eq!(
        slug("Sharding across replicas: `--shards`"),
        "sharding-across-replicas---shards"
    );
    assert_eq!(slug("The node (`ctl.sh start --node`)"), "the-node-ctlsh-start---node");
    assert_eq!(
        slug("Previewing a rule change: `ruleop diff`"),
        "previewing-a-rule-change-ruleop-diff"
    );
    let set = anchors("# A\n\n```\n# not a heading\n```\n## A\n");
    assert_eq!(set, BTreeSet::from(["a".to_string(), "a-1".to_string()]));
}

#[test]
fn links_inside_code_are_not_links() {
    let lines = prose_lines("see `[x](nowhere)` and [y](here.md)\n```\n[z](gone)\n```\n");
    let targets: Vec<String> = lines.iter().flat_map(|(_, _, l)| link_targets(l)).collect();
    assert_eq!(targets, vec!["here.md".to_string()]);
}

#[test]
fn the_readme_rule_is_the_shipped_cache_rule() {
    let root = root();
    let readme = std::fs::read_to_string(root.join("README.md")).expect("read README.md");
    for file in ["rules/cache.yaml", "templates/cache/service.yaml.j2"] {
        let text = std::fs::read_to_string(root.join(file)).expect("read a shipped file");
        // The rule's first line is a comment the README says in prose.
        let body: String = text
            .lines()
            .filter(|l| !l.starts_with("# "))
            .map(|l| format!("{l}\n"))
            .collect();
        assert!(
            readme.contains(&body),
            "README.md no longer shows {file} as shipped: copy it again"
        );
    }
}
