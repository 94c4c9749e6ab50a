//! A directory updated the way the kubelet updates a mounted ConfigMap: files live in a
//! timestamped directory, `..data` links to it, and each top-level entry links through
//! `..data`; an update writes a new directory and renames a new `..data` link over the old.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

/// A simulated ConfigMap volume.
pub struct Mount {
    dir: tempfile::TempDir,
    version: u32,
}

impl Mount {
    /// A mount holding `files` (relative path, content).
    pub fn new(files: &[(String, String)]) -> Self {
        let mut mount = Mount {
            dir: tempfile::tempdir().expect("tempdir"),
            version: 0,
        };
        mount.swap(files);
        mount
    }

    /// A mount holding every file under `source` (paths relative to it).
    pub fn from_dir(source: &Path) -> Self {
        Self::new(&files_under(source))
    }

    /// The mount point.
    pub fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Atomically replaces the whole content, as the kubelet does.
    pub fn swap(&mut self, files: &[(String, String)]) {
        self.version += 1;
        let root = self.dir.path();
        let data_dir_name = format!("..2026_11_29_10_00_{:02}.{}", self.version, std::process::id());
        let data_dir = root.join(&data_dir_name);
        for (path, content) in files {
            let target = data_dir.join(path);
            std::fs::create_dir_all(target.parent().expect("parent")).expect("mkdir");
            std::fs::write(target, content).expect("write");
        }
        let old = std::fs::read_link(root.join("..data")).ok();
        let tmp = root.join("..data_tmp");
        let _ = std::fs::remove_file(&tmp);
        symlink(&data_dir_name, &tmp).expect("symlink ..data_tmp");
        std::fs::rename(&tmp, root.join("..data")).expect("rename ..data_tmp -> ..data");
        let top: std::collections::BTreeSet<String> = files
            .iter()
            .map(|(p, _)| p.split('/').next().unwrap_or(p).to_owned())
            .collect();
        for entry in std::fs::read_dir(root).expect("read mount").flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with("..") && !top.contains(&name) {
                let _ = std::fs::remove_file(entry.path());
            }
        }
        for name in &top {
            let link = root.join(name);
            if std::fs::symlink_metadata(&link).is_err() {
                symlink(Path::new("..data").join(name), &link).expect("top-level symlink");
            }
        }
        if let Some(old) = old {
            let _ = std::fs::remove_dir_all(root.join(old));
        }
    }
}

/// Every file under `dir` as (relative path, content), through links, skipping dot entries.
pub fn files_under(dir: &Path) -> Vec<(String, String)> {
    let mut files = Vec::new();
    let mut stack: Vec<PathBuf> = vec![dir.to_path_buf()];
    while let Some(current) = stack.pop() {
        for entry in std::fs::read_dir(&current).expect("read dir").flatten() {
            let path = entry.path();
            if entry.file_name().to_string_lossy().starts_with('.') {
                continue;
            }
            if path.is_dir() {
                stack.push(path);
            } else {
                let relative = path.strip_prefix(dir).expect("prefix").to_string_lossy().into_owned();
                files.push((relative, std::fs::read_to_string(&path).expect("read")));
            }
        }
    }
    files.sort();
    files
}
