//! Hot reload: notice edits of the rules and templates directories (a mounted ConfigMap is
//! updated by atomically re-pointing its `..data` symlink, so whole directories are watched,
//! never single files), debounce bursts, and fall back to a periodic re-read. Whether the
//! content really changed is decided by a fingerprint of every file read through the links.

use std::path::{Path, PathBuf};
use std::time::Duration;

use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use sha2::{Digest, Sha256};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::engine::base::digest::hex;
use crate::engine::base::files::read_tree;

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
    /// The watcher is gone (or never started): only the periodic re-read remains.
    closed: bool,
    /// When the last event of a burst not yet reported came.
    pending: Option<Instant>,
    /// When the periodic re-read is due.
    next_poll: Option<Instant>,
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
        let (watcher, error) = match watcher {
            Ok(watcher) => (Some(watcher), None),
            Err(e) => (None, Some(e)),
        };
        let dir_watcher = DirWatcher {
            _watcher: watcher,
            events,
            closed: false,
            pending: None,
            next_poll: None,
        };
        (dir_watcher, error)
    }

    /// Waits until something may have changed: a file event followed by `debounce` of quiet
    /// (bursts collapse into one), or `poll` elapsing without events. Cancel-safe: it is one
    /// branch of the reload loop's `select!`, and an event seen by a wait that another branch
    /// cut short is reported by the next wait, whose poll is not pushed back either.
    pub(crate) async fn changed(&mut self, debounce: Duration, poll: Duration) {
        let next_poll = *self.next_poll.get_or_insert_with(|| Instant::now() + poll);
        loop {
            let due = self.pending.map_or(next_poll, |last| last + debounce);
            if self.closed {
                tokio::time::sleep_until(due).await;
                break;
            }
            tokio::select! {
                event = self.events.recv() => match event {
                    Some(()) => self.pending = Some(Instant::now()),
                    None => self.closed = true,
                },
                () = tokio::time::sleep_until(due) => break,
            }
        }
        self.pending = None;
        self.next_poll = Some(Instant::now() + poll);
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

    #[tokio::test]
    async fn a_change_seen_by_a_wait_cut_short_is_reported_by_the_next() {
        let dir = tempfile::tempdir().expect("tempdir");
        let (mut watcher, error) = DirWatcher::new(&[dir.path().to_path_buf()]);
        assert!(error.is_none());
        let (debounce, poll) = (Duration::from_millis(200), Duration::from_secs(30));
        std::fs::write(dir.path().join("f"), "x").expect("write");
        let started = std::time::Instant::now();
        // Each wait is cut short (as another branch of the reload loop would) before the
        // debounce ends; the event it took is not lost.
        let mut cut = 0;
        while tokio::time::timeout(Duration::from_millis(50), watcher.changed(debounce, poll))
            .await
            .is_err()
        {
            cut += 1;
            assert!(started.elapsed() < Duration::from_secs(10), "the change was lost");
        }
        assert!(cut >= 3, "the waits were cut short: {cut}");
    }
}
