//! Which objects a watch's events touch, in step with the caches. The caches (kube-runtime's
//! stores, the parent bodies, the children index) take a relist in whole when it completes
//! (`InitDone`), so that a half-listed cache never shows half the objects. A reconcile started
//! by an `InitApply` would read the version from *before* the relist, find nothing to do, and the
//! trigger would be spent: a change made while the watch was down (an API-server restart, a 410
//! Gone) then waited for the next resync. So the objects of a relist are handed on only once it
//! is complete, after the caches swapped it in, each as a metadata-only copy (what mapping it to
//! its parent needs).
//!
//! A watch error is not handed on. The watch has logged it, reported it (`/readyz`) and backs off
//! by itself (`cache::watch`), where kube-runtime's Controller would back off its whole trigger
//! stream on each error it is handed: every watch of the rule, parents and children, held for up
//! to about 30 s and longer with jitter, forgiven only after two quiet minutes. An outage's errors
//! (refused connections, then 410 Gone for each watch) left a controller deaf for minutes after
//! its watches were back.

use futures::{Stream, StreamExt};
use kube::api::DynamicObject;
use kube::runtime::watcher::{self, Event};

/// The objects `events` touch, for triggers: an applied object at once, a deleted one at once
/// when `deletes`, the objects of a relist when it completes, plus what `vanished` returns for
/// that completion (objects the relist no longer lists, which no Delete event will name). Errors
/// are dropped (see the module's note).
pub(crate) fn touched_after_relists<S>(
    events: S,
    deletes: bool,
    mut vanished: impl FnMut() -> Vec<DynamicObject> + Send + 'static,
) -> impl Stream<Item = DynamicObject> + Send + 'static
where
    S: Stream<Item = Result<Event<DynamicObject>, watcher::Error>> + Send + 'static,
{
    events
        .scan(Vec::new(), move |relist: &mut Vec<DynamicObject>, event| {
            let touched = match event {
                Ok(Event::Apply(object)) => vec![object],
                Ok(Event::Delete(object)) if deletes => vec![object],
                Ok(Event::Delete(_)) => Vec::new(),
                Ok(Event::Init) => {
                    relist.clear();
                    Vec::new()
                }
                Ok(Event::InitApply(object)) => {
                    relist.push(metadata_only(object));
                    Vec::new()
                }
                Ok(Event::InitDone) => std::mem::take(relist).into_iter().chain(vanished()).collect(),
                Err(_) => Vec::new(),
            };
            futures::future::ready(Some(futures::stream::iter(touched)))
        })
        .flatten()
}

/// The object without its data: what triggers and the parent mapping read is in its metadata.
fn metadata_only(mut object: DynamicObject) -> DynamicObject {
    object.data = serde_json::Value::Null;
    object.metadata.managed_fields = None;
    object
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(name: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "ns"}, "data": {"big": "x"},
        }))
        .expect("an object")
    }

    async fn touched_by(
        events: Vec<Result<Event<DynamicObject>, watcher::Error>>,
        deletes: bool,
        gone: &'static [&'static str],
    ) -> Vec<String> {
        let stream = touched_after_relists(futures::stream::iter(events), deletes, move || {
            gone.iter().map(|name| object(name)).collect()
        });
        stream.map(|o| o.metadata.name.unwrap_or_default()).collect().await
    }

    async fn touched(events: Vec<Event<DynamicObject>>, deletes: bool, gone: &'static [&'static str]) -> Vec<String> {
        touched_by(events.into_iter().map(Ok).collect(), deletes, gone).await
    }

    #[tokio::test]
    async fn a_relist_is_handed_on_when_complete_with_what_it_no_longer_lists() {
        let events = vec![
            Event::Apply(object("a")),
            Event::Init,
            Event::InitApply(object("b")),
            Event::InitApply(object("c")),
            Event::InitDone,
            Event::Delete(object("b")),
        ];
        assert_eq!(
            touched(events.clone(), true, &["gone"]).await,
            ["a", "b", "c", "gone", "b"]
        );
        assert_eq!(touched(events, false, &[]).await, ["a", "b", "c"]);
    }

    #[tokio::test]
    async fn a_relist_that_restarts_hands_on_only_the_last_one() {
        let events = vec![
            Event::Init,
            Event::InitApply(object("old")),
            Event::Init,
            Event::InitApply(object("new")),
            Event::InitDone,
        ];
        assert_eq!(touched(events, true, &[]).await, ["new"]);
    }

    #[tokio::test]
    async fn watch_errors_are_not_handed_on_and_a_relist_after_one_starts_afresh() {
        let events = vec![
            Ok(Event::Apply(object("a"))),
            Err(watcher::Error::NoResourceVersion),
            Ok(Event::Init),
            Ok(Event::InitApply(object("cut-short"))),
            Err(watcher::Error::NoResourceVersion),
            Ok(Event::Init),
            Ok(Event::InitApply(object("b"))),
            Ok(Event::InitDone),
        ];
        assert_eq!(touched_by(events, true, &[]).await, ["a", "b"]);
    }

    #[tokio::test]
    async fn the_handed_on_copy_carries_metadata_only() {
        let stream = touched_after_relists(
            futures::stream::iter([Ok(Event::Init), Ok(Event::InitApply(object("a"))), Ok(Event::InitDone)]),
            true,
            Vec::new,
        );
        let objects: Vec<_> = stream.collect().await;
        let object = &objects[0];
        assert_eq!(object.metadata.name.as_deref(), Some("a"));
        assert!(object.data.is_null());
    }
}
