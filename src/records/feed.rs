//! A watch of some ConfigMaps, each object it applies turned into a value and queued for one
//! reader: what the rollout requests and the recorded rollout states both need.

use futures::StreamExt;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::Api;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tracing::warn;

/// The values seen so far; the watch ends when this is dropped.
pub(crate) struct ConfigMapFeed<T> {
    seen: mpsc::UnboundedReceiver<T>,
    task: JoinHandle<()>,
}

impl<T> Drop for ConfigMapFeed<T> {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl<T: Send + 'static> ConfigMapFeed<T> {
    /// Watches the ConfigMaps of `api` that `config` selects (those that exist first, then each
    /// change) and queues `read` of each. A failing watch is retried with backoff
    /// (`cache::retry`) and logged as `watching <what> failed`.
    pub(crate) fn start(
        api: Api<ConfigMap>,
        config: watcher::Config,
        what: &'static str,
        read: impl Fn(ConfigMap) -> T + Send + 'static,
    ) -> Self {
        // Retried as the caches' watches are (a 410 relists at once); no probe wakes this one.
        let wake = std::sync::Arc::new(tokio::sync::Notify::new());
        let stream = crate::cache::retry::retried(watcher(api, config), wake).applied_objects();
        let (send, seen) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(stream);
            while let Some(next) = stream.next().await {
                match next {
                    Ok(config_map) => {
                        if send.send(read(config_map)).is_err() {
                            return;
                        }
                    }
                    Err(e) => warn!(error = %e, "watching {what} failed; retrying"),
                }
            }
        });
        ConfigMapFeed { seen, task }
    }

    /// The next value.
    pub(crate) async fn next(&mut self) -> Option<T> {
        self.seen.recv().await
    }
}
