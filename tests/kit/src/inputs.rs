//! Rules, templates and parents for tests: the shipped ones, edited or extended.

use std::path::{Path, PathBuf};

use super::*;

/// A rules directory: the shipped rules with `edit` applied to each file's text.
pub fn rules_dir(edit: impl Fn(&str) -> String) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    for entry in std::fs::read_dir(root().join("rules")).expect("rules").flatten() {
        let text = std::fs::read_to_string(entry.path()).expect("read rule");
        std::fs::write(dir.path().join(entry.file_name()), edit(&text)).expect("write rule");
    }
    dir
}

/// The shipped rules plus a webhook action `notify` (once per generation) to `url`.
pub fn rules_with_webhook(url: &str) -> tempfile::TempDir {
    let origin = url.trim_end_matches("/hook").to_owned();
    rules_with_http_action(url, &format!("[{origin:?}]"))
}

/// The shipped rules plus a webhook action `notify` to `url`, allowed to reach `allowed_hosts`
/// (a YAML flow list).
pub fn rules_with_http_action(url: &str, allowed_hosts: &str) -> tempfile::TempDir {
    let url = url.to_owned();
    let allowed_hosts = allowed_hosts.to_owned();
    rules_dir(move |text| {
        if !text.contains("name: database") {
            return text.to_owned();
        }
        text.replace(
            "  actions:\n",
            &format!(
                "  actions:\n    - id: notify\n      guard: {{generation: true}}\n      http:\n        url: {url}\n        allowedHosts: {allowed_hosts}\n        body: '{{\"db\": {{{{ metadata.name | tojson }}}}, \"generation\": {{{{ metadata.generation }}}}}}'\n      record: {{condition: Notified}}\n"
            ),
        )
    })
}

/// A templates directory: the shipped templates plus `extra` (relative path, text).
pub fn templates_with(extra: &[(&str, &str)]) -> tempfile::TempDir {
    fn copy(from: &Path, to: &Path) {
        std::fs::create_dir_all(to).expect("mkdir");
        for entry in std::fs::read_dir(from).expect("read dir").flatten() {
            let target = to.join(entry.file_name());
            if entry.path().is_dir() {
                copy(&entry.path(), &target);
            } else {
                std::fs::copy(entry.path(), target).expect("copy");
            }
        }
    }
    let dir = tempfile::tempdir().expect("tempdir");
    copy(&templates(), dir.path());
    write_files(dir.path(), extra);
    dir
}

/// A directory of the files `files` (relative path, text) alone.
pub fn written(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("tempdir");
    write_files(dir.path(), files);
    dir
}

fn write_files(dir: &Path, files: &[(&str, &str)]) {
    for (path, text) in files {
        let path = dir.join(path);
        std::fs::create_dir_all(path.parent().expect("parent")).expect("mkdir");
        std::fs::write(path, text).expect("write file");
    }
}

/// The shipped templates directory.
pub fn templates() -> PathBuf {
    root().join("templates")
}

/// A Database manifest.
pub fn database(name: &str, replicas: u32, extra_spec: &str) -> String {
    // Its credentials Secret first (the Database stays the last document, so `extra_spec` lands in
    // its spec): without it the shipped rule says Ready=False, SecretNotFound.
    format!(
        "apiVersion: v1\nkind: Secret\nmetadata: {{name: {name}-credentials}}\nstringData: {{password: test-password}}\n---\n\
         apiVersion: myorg.io/v1\nkind: Database\nmetadata:\n  name: {name}\nspec:\n  version: \"16\"\n  replicas: {replicas}\n  storage:\n    size: 1Gi\n{extra_spec}"
    )
}
