//! Hot reload: notice edits of the rules and templates directories (a mounted ConfigMap is
//! updated by atomically re-pointing its `..data` symlink, so whole directories are watched,
//! never single files), debounce bursts, and fall back to a periodic re-read. Whether the
//! content really changed is decided by a fingerprint of every file read through the links.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;

use crate::engine::rules::load::{hex, read_tree};

/// A fingerprint of every rule and template file (name and content, read through symlinks).
pub(crate) fn fingerprint(rules: &Path, templates: &Path) -> String {
    let mut ignored = Vec::new();
    let mut hasher = Sha256::new();
    for dir in [rules, templates] {
        for (name, _, text) in read_tree(dir, |_| true, &mut ignored) {
            hasher.update(name.as_bytes());
            hasher.update([0]);
            hasher.update(text.as_bytes());
            hasher.update([0]);
        }
        hasher.update([1]);
    }
    hex(&hasher.finalize()[..16])
}

/// Change notifications for a set of directories.
pub(crate) struct DirWatcher {
    _watcher: Option<RecommendedWatcher>,
    events: mpsc::UnboundedReceiver<()>,
}

impl DirWatcher {
    /// Watches `dirs` recursively. If the platform watcher cannot start, only the periodic
    /// re-read remains (logged by the caller through the returned error).
    pub(crate) fn new(dirs: &[PathBuf]) -> (Self, Option<notify::Error>) {
        let (tx, events) = mpsc::unbounded_channel();
        let watcher = notify::recommended_watcher(move |event: notify::Result<notify::Event>| {
            if event.is_ok() {
                let _ = tx.send(());
            }
        })
        .and_then(|mut watcher| {
            for dir in dirs {
                watcher.watch(dir, RecursiveMode::Recursive)?;
            }
            Ok(watcher)
        });
        match watcher {
            Ok(watcher) => (
                DirWatcher {
                    _watcher: Some(watcher),
                    events,
                },
                None,
            ),
            Err(e) => (DirWatcher { _watcher: None, events }, Some(e)),
        }
    }

    /// Waits until something may have changed: a file event followed by `debounce` of quiet
    /// (bursts collapse into one), or `poll` elapsing without events.
    pub(crate) async fn changed(&mut self, debounce: Duration, poll: Duration) {
        tokio::select! {
            event = self.events.recv() => {
                if event.is_none() {
                    // The watcher is gone: fall back to polling.
                    tokio::time::sleep(poll).await;
                    return;
                }
            }
            () = tokio::time::sleep(poll) => return,
        }
        loop {
            match tokio::time::timeout(debounce, self.events.recv()).await {
                Ok(Some(())) => continue,
                Ok(None) | Err(_) => return,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fingerprint_follows_content_not_timestamps() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (rules, templates) = (dir.path().join("r"), dir.path().join("t"));
        std::fs::create_dir_all(&rules).expect("mkdir");
        std::fs::create_dir_all(&templates).expect("mkdir");
        std::fs::write(rules.join("a.yaml"), "x").expect("write");
        let first = fingerprint(&rules, &templates);
        std::fs::write(rules.join("a.yaml"), "x").expect("write");
        assert_eq!(fingerprint(&rules, &templates), first);
        std::fs::write(templates.join("b.j2"), "y").expect("write");
        assert_ne!(fingerprint(&rules, &templates), first);
    }

    #[tokio::test]
    async fn a_burst_of_events_is_one_change() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut watcher, error) = DirWatcher::new(&[dir.path().to_path_buf()]);
        assert!(error.is_none());
        for i in 0..5 {
            std::fs::write(dir.path().join(format!("f{i}")), "x").expect("write");
        }
        let started = std::time::Instant::now();
        watcher
            .changed(Duration::from_millis(100), Duration::from_secs(10))
            .await;
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "the events were seen, not the poll"
        );
        let quiet = tokio::time::timeout(
            Duration::from_millis(300),
            watcher.changed(Duration::from_millis(50), Duration::from_secs(10)),
        )
        .await;
        assert!(quiet.is_err(), "the burst was consumed as one change");
    }
}
