//! Watch streams that one bad object cannot stall, and that report their health.
//!
//! kube decodes a whole LIST response at once, so one object it cannot decode (a custom resource
//! that preserves unknown fields, nested deeper than serde_json's 128 levels) fails the LIST of
//! its kind every time, and no object of that kind is ever cached or reconciled. Here each item
//! is first taken as raw text (serde_json skips nested values without recursing), then decoded
//! on its own: an object that does not decode costs only itself. It is reported (a log line and
//! an Event on it, once per version) and dropped from the caches until it changes. So is an
//! object whose JSON text is over the size cap (`ruleop run --max-object-size`): a tenant's
//! megabyte ConfigMaps cost the operator nothing to keep.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::Resource;
use kube::api::{Api, DynamicObject, ListParams, WatchEvent, WatchParams};
use kube::core::{DynamicResourceScope, ObjectMeta, TypeMeta};
use kube::discovery::ApiResource;
use kube::runtime::watcher;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::Value;
use tokio::sync::Notify;
use tracing::{debug, info, warn};

use crate::engine::diagnostic::bounded;
use crate::ops::health::{PROBE_INTERVAL, Transition, WatchToken};

/// Longest decode error kept (logs, Events).
const MAX_ERROR: usize = 300;
/// Remembered (uid, resourceVersion) pairs already reported; forgotten wholesale past this.
const MAX_REPORTED: usize = 10_000;

/// An object from a LIST or watch: decoded, or only its metadata and why the rest failed.
#[derive(Debug, Clone)]
pub(crate) enum Tolerant {
    /// A decoded object.
    Object {
        /// The object.
        object: DynamicObject,
        /// The length of its JSON text as the API server sent it.
        bytes: usize,
    },
    /// An object that does not decode.
    Undecodable {
        /// Its metadata (default when even that does not decode).
        metadata: ObjectMeta,
        /// The decode error, bounded.
        error: String,
    },
}

impl Tolerant {
    /// Decodes one object's JSON text, leaving out what the engine never reads (see [`Slim`]).
    pub(crate) fn from_json(text: &str) -> Tolerant {
        match serde_json::from_str::<Slim>(text) {
            Ok(Slim(object)) => Tolerant::Object {
                object,
                bytes: text.len(),
            },
            Err(e) => {
                /// What identifies the object. Everything else is skipped, which serde_json does
                /// without recursing: `managedFields` mirrors the nesting of the fields it covers.
                #[derive(Deserialize)]
                #[serde(rename_all = "camelCase")]
                struct Meta {
                    name: Option<String>,
                    namespace: Option<String>,
                    uid: Option<String>,
                    resource_version: Option<String>,
                    generation: Option<i64>,
                    labels: Option<std::collections::BTreeMap<String, String>>,
                    owner_references: Option<Vec<OwnerReference>>,
                }
                #[derive(Deserialize)]
                struct Head {
                    metadata: Option<Meta>,
                }
                let metadata = serde_json::from_str::<Head>(text)
                    .ok()
                    .and_then(|head| head.metadata)
                    .map(|m| ObjectMeta {
                        name: m.name,
                        namespace: m.namespace,
                        uid: m.uid,
                        resource_version: m.resource_version,
                        generation: m.generation,
                        labels: m.labels,
                        owner_references: m.owner_references,
                        ..ObjectMeta::default()
                    })
                    .unwrap_or_default();
                Tolerant::Undecodable {
                    metadata,
                    error: bounded(&e.to_string(), MAX_ERROR).into_owned(),
                }
            }
        }
    }
}

/// kubectl's copy of the whole object it last applied, in an annotation.
pub(crate) const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// An object decoded for the caches: `metadata.managedFields` (often half an object: it mirrors
/// the nesting of every field it covers, once per field manager), `metadata.selfLink` and
/// kubectl's last-applied annotation (a second copy of the object) are skipped while decoding,
/// so they are never built, not even for the objects of a LIST page being decoded at once.
/// (`DynamicObject`'s own decode buffers the whole object first, for its flattened fields.)
pub(crate) struct Slim(pub DynamicObject);

/// An object one of our writes returned, as the caches would keep it ([`Slim`]): without
/// `managedFields`, `selfLink` and kubectl's last-applied copy. What a write returned and what the
/// watch later delivers then compare equal where the object is the same.
pub(crate) fn as_cached(mut object: DynamicObject) -> serde_json::Value {
    object.metadata.managed_fields = None;
    object.metadata.self_link = None;
    if let Some(annotations) = object.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    serde_json::to_value(object).unwrap_or_default()
}

/// [`ObjectMeta`] without `managedFields` and `selfLink` (serde skips unknown keys unbuilt).
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct SlimMeta {
    #[serde(default, deserialize_with = "annotations_but_last_applied")]
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    uid: Option<String>,
}

fn annotations_but_last_applied<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<BTreeMap<String, String>>, D::Error> {
    let mut annotations = Option::<BTreeMap<String, String>>::deserialize(deserializer)?;
    if let Some(map) = annotations.as_mut() {
        map.remove(LAST_APPLIED);
    }
    Ok(annotations)
}

impl From<SlimMeta> for ObjectMeta {
    fn from(m: SlimMeta) -> ObjectMeta {
        ObjectMeta {
            annotations: m.annotations,
            creation_timestamp: m.creation_timestamp,
            deletion_grace_period_seconds: m.deletion_grace_period_seconds,
            deletion_timestamp: m.deletion_timestamp,
            finalizers: m.finalizers,
            generate_name: m.generate_name,
            generation: m.generation,
            labels: m.labels,
            managed_fields: None,
            name: m.name,
            namespace: m.namespace,
            owner_references: m.owner_references,
            resource_version: m.resource_version,
            self_link: None,
            uid: m.uid,
        }
    }
}

impl<'de> Deserialize<'de> for Slim {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Fields;
        impl<'de> Visitor<'de> for Fields {
            type Value = DynamicObject;

            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a Kubernetes object")
            }

            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<DynamicObject, A::Error> {
                let mut metadata = ObjectMeta::default();
                let mut data = serde_json::Map::new();
                while let Some(key) = map.next_key::<String>()? {
                    if key == "metadata" {
                        metadata = map
                            .next_value::<Option<SlimMeta>>()?
                            .map(Into::into)
                            .unwrap_or_default();
                    } else {
                        data.insert(key, map.next_value()?);
                    }
                }
                let types = match (data.get("apiVersion"), data.get("kind")) {
                    (Some(Value::String(api_version)), Some(Value::String(kind))) => Some(TypeMeta {
                        api_version: api_version.clone(),
                        kind: kind.clone(),
                    }),
                    _ => None,
                };
                if types.is_some() {
                    data.remove("apiVersion");
                    data.remove("kind");
                }
                Ok(DynamicObject {
                    types,
                    metadata,
                    data: Value::Object(data),
                })
            }
        }
        deserializer.deserialize_map(Fields).map(Slim)
    }
}

impl<'de> Deserialize<'de> for Tolerant {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let raw = Box::<serde_json::value::RawValue>::deserialize(deserializer)?;
        Ok(Tolerant::from_json(raw.get()))
    }
}

impl Resource for Tolerant {
    type DynamicType = ApiResource;
    type Scope = DynamicResourceScope;

    fn group(dt: &ApiResource) -> Cow<'_, str> {
        dt.group.as_str().into()
    }

    fn version(dt: &ApiResource) -> Cow<'_, str> {
        dt.version.as_str().into()
    }

    fn kind(dt: &ApiResource) -> Cow<'_, str> {
        dt.kind.as_str().into()
    }

    fn api_version(dt: &ApiResource) -> Cow<'_, str> {
        dt.api_version.as_str().into()
    }

    fn plural(dt: &ApiResource) -> Cow<'_, str> {
        dt.plural.as_str().into()
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            Tolerant::Object { object, .. } => &object.metadata,
            Tolerant::Undecodable { metadata, .. } => metadata,
        }
    }

    fn meta_mut(&mut self) -> &mut ObjectMeta {
        match self {
            Tolerant::Object { object, .. } => &mut object.metadata,
            Tolerant::Undecodable { metadata, .. } => metadata,
        }
    }
}

/// Why a watched object is not cached.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Skipped {
    /// It does not decode (the error, bounded).
    Undecodable(String),
    /// Its JSON text is over `ruleop run --max-object-size`.
    TooLarge {
        /// Its size.
        bytes: usize,
        /// The cap.
        cap: usize,
    },
}

impl Skipped {
    /// The Event and condition reason: `Undecodable` or `ObjectTooLarge`.
    pub(crate) fn reason(&self) -> &'static str {
        match self {
            Skipped::Undecodable(_) => "Undecodable",
            Skipped::TooLarge { .. } => "ObjectTooLarge",
        }
    }

    /// What a tenant reads (Event note, condition message) about their object of `kind`.
    pub(crate) fn message(&self, kind: &str) -> String {
        match self {
            Skipped::Undecodable(error) => {
                format!("ruleop cannot read this {kind}: {error}; it is not reconciled until it is fixed")
            }
            Skipped::TooLarge { bytes, cap } => format!(
                "this {kind} is {bytes} bytes, over ruleop's cap of {cap} bytes for an object it keeps \
                 in memory (ruleop run --max-object-size); it is not reconciled until it is smaller"
            ),
        }
    }
}

/// What runs once per reported object (a metric, the Event, the parent's status).
type OnSkipped = Box<dyn Fn(&ObjectMeta, &Skipped) + Send + Sync>;

/// Reports objects that are skipped (they do not decode, or are over the size cap): a warning,
/// and the caller's `on_report` (a Warning Event on the object, written by `apply::skipped`),
/// once per generation (or version, for kinds without one), so a tenant's broken or oversized
/// object is visible to them without flooding anyone.
pub(crate) struct SkipReporter {
    resource: ApiResource,
    /// Objects whose JSON text is longer are not cached.
    max_object_bytes: usize,
    on_report: OnSkipped,
    reported: Mutex<HashSet<(String, String)>>,
}

impl SkipReporter {
    /// A reporter for objects of `resource` that skips those over `max_object_bytes`;
    /// `on_report` runs once per reported version (a metric, the Event, the parent's status:
    /// what writes is the caller's, the cache only decides).
    pub(crate) fn new(
        resource: ApiResource,
        max_object_bytes: usize,
        on_report: impl Fn(&ObjectMeta, &Skipped) + Send + Sync + 'static,
    ) -> Self {
        SkipReporter {
            resource,
            max_object_bytes,
            on_report: Box::new(on_report),
            reported: Mutex::default(),
        }
    }

    fn report(&self, metadata: &ObjectMeta, why: &Skipped) {
        let uid = metadata.uid.clone().unwrap_or_default();
        // Once per generation where there is one: a status write (ours, marking the parent)
        // makes a new version of the same object.
        let version = match metadata.generation {
            Some(generation) => format!("generation {generation}"),
            None => metadata.resource_version.clone().unwrap_or_default(),
        };
        if let Ok(mut reported) = self.reported.lock() {
            if reported.len() >= MAX_REPORTED {
                reported.clear();
            }
            if !reported.insert((uid, version)) {
                return;
            }
        }
        (self.on_report)(metadata, why);
        let namespace = metadata.namespace.clone().unwrap_or_default();
        let name = metadata.name.clone().unwrap_or_default();
        match why {
            Skipped::Undecodable(error) => warn!(
                kind = %self.resource.kind, %namespace, %name, %error,
                "an object cannot be decoded; it is skipped (not reconciled) until it changes"
            ),
            Skipped::TooLarge { bytes, cap } => warn!(
                kind = %self.resource.kind, %namespace, %name, bytes, cap,
                "an object is over the size cap; it is skipped (not cached, not reconciled) until it changes"
            ),
        }
    }
}

/// Parses `--max-object-size`: bytes, or a number with `Ki` or `Mi` (`256Ki`, `1Mi`).
pub(crate) fn parse_size(text: &str) -> Result<usize, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, ""),
    };
    let factor = match unit {
        "" => 1,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        other => {
            return Err(format!(
                "unknown unit {other:?}: give bytes, or a number with Ki or Mi (256Ki)"
            ));
        }
    };
    number
        .parse::<usize>()
        .ok()
        .and_then(|n| n.checked_mul(factor))
        .filter(|&n| n > 0)
        .ok_or_else(|| format!("{text:?} is not a size above 0: give bytes, or a number with Ki or Mi (256Ki)"))
}

/// How a watch makes its first list of a kind (`ruleop run --initial-list`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum InitialList {
    /// Stream when the API server answers a probe watch with `sendInitialEvents=true` by the
    /// bookmark that ends the initial events (Kubernetes 1.32 and later), else page.
    #[default]
    Auto,
    /// The streaming list: one watch that sends every object as an event, then a bookmark. The
    /// objects arrive (and are decoded) one at a time, never a page of them at once.
    Streaming,
    /// A LIST page by page (500 objects each), then a watch: what every API server answers.
    Paged,
}

impl InitialList {
    /// The names `--initial-list` accepts, in the order of the variants.
    pub const NAMES: [&str; 3] = ["auto", "streaming", "paged"];
}

impl std::str::FromStr for InitialList {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "auto" => Ok(InitialList::Auto),
            "streaming" => Ok(InitialList::Streaming),
            "paged" => Ok(InitialList::Paged),
            other => Err(format!("{other:?} is not one of {}", Self::NAMES.join(", "))),
        }
    }
}

/// Label the streaming-list probe selects on: no object carries it, so the server answers the
/// probe with the bookmark alone.
const PROBE_SELECTOR: &str = "ruleop.io/initial-list-probe";
/// Longest the probe waits for that bookmark: a server that ignores `sendInitialEvents`
/// (before Kubernetes 1.27) sends nothing on an empty selection.
const PROBE_WAIT: Duration = Duration::from_secs(5);
/// The annotation of the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// Whether the API server streams lists of `api`'s kind: it answers a watch with
/// `sendInitialEvents=true` (on a selection of nothing) by the bookmark that ends the initial
/// events. A refusal (older servers reject the parameters), an error or silence means no.
async fn streams_lists(api: &Api<Tolerant>) -> bool {
    let params = WatchParams::streaming_lists()
        .labels(PROBE_SELECTOR)
        .timeout(PROBE_WAIT.as_secs() as u32);
    let probe = async {
        match api.watch(&params, "0").await {
            Ok(events) => ends_initial_events(events).await,
            Err(e) => {
                debug!(error = %e, "the streaming-list probe was refused");
                false
            }
        }
    };
    tokio::time::timeout(PROBE_WAIT, probe).await.unwrap_or(false)
}

/// Whether a probe watch shows the bookmark that ends the initial events before an error or its end.
async fn ends_initial_events<K>(events: impl Stream<Item = kube::Result<WatchEvent<K>>>) -> bool {
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        match event {
            Ok(WatchEvent::Bookmark(mark)) if mark.metadata.annotations.contains_key(INITIAL_EVENTS_END) => {
                return true;
            }
            Ok(WatchEvent::Error(_)) | Err(_) => return false,
            Ok(_) => {}
        }
    }
    false
}

/// `config` with the initial list chosen by `--initial-list` (probing the server for `auto`).
async fn with_initial_list(api: &Api<Tolerant>, config: watcher::Config, initial_list: InitialList) -> watcher::Config {
    let kind = api.resource_url().to_owned();
    let streaming = match initial_list {
        InitialList::Streaming => true,
        InitialList::Paged => false,
        InitialList::Auto => {
            let streams = streams_lists(api).await;
            if !streams {
                info!(%kind, "the API server does not stream lists (sendInitialEvents); listing page by page");
            }
            streams
        }
    };
    let how = if streaming { "streaming" } else { "paged" };
    info!(%kind, initial_list = %how, "a watch lists its kind first");
    if streaming { config.streaming_lists() } else { config }
}

/// A watch of `api` that skips (and reports) objects that do not decode or are over the size
/// cap, and keeps `token` (its
/// readiness) up to date, probing with a one-item LIST while a silent recovery is pending. Its
/// first list streams or pages as [`InitialList`] says; either way `InitDone` (readiness) comes
/// only once every object was listed.
pub(crate) fn watch(
    api: Api<Tolerant>,
    config: watcher::Config,
    initial_list: InitialList,
    token: WatchToken,
    reporter: Arc<SkipReporter>,
) -> impl Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>> + Send + 'static {
    let token = Arc::new(token);
    let probe_api = api.clone();
    let wake = Arc::new(Notify::new());
    let events = futures::stream::once(async move {
        let config = with_initial_list(&api, config, initial_list).await;
        watcher(api, config)
    })
    .flatten();
    super::retry::retried(events, wake.clone())
        .inspect(move |item| {
            if token.observe(item) == Transition::Failing {
                spawn_probe(probe_api.clone(), Arc::downgrade(&token), wake.clone());
            }
        })
        .filter_map(move |item| {
            let item = decoded(item, reporter.max_object_bytes, |metadata, why| {
                reporter.report(metadata, why)
            });
            std::future::ready(item)
        })
}

/// Maps one watcher item to objects the caches may keep. An object that does not decode, or
/// is over the size cap, is skipped and reported: left out of a relist (`InitApply`), and a
/// `Delete` in place of an `Apply`, so no cache keeps an older version of it.
fn decoded(
    item: Result<watcher::Event<Tolerant>, watcher::Error>,
    max_object_bytes: usize,
    report: impl Fn(&ObjectMeta, &Skipped),
) -> Option<Result<watcher::Event<DynamicObject>, watcher::Error>> {
    use watcher::Event as E;
    let stub = |metadata: ObjectMeta| DynamicObject {
        types: None,
        metadata,
        data: serde_json::Value::Object(serde_json::Map::new()),
    };
    /// The object to cache, or why not.
    enum Kept {
        Object(DynamicObject),
        Skipped(ObjectMeta, Skipped),
    }
    let keep = |tolerant: Tolerant| match tolerant {
        Tolerant::Object { object, bytes } if bytes > max_object_bytes => {
            let why = Skipped::TooLarge {
                bytes,
                cap: max_object_bytes,
            };
            Kept::Skipped(object.metadata, why)
        }
        Tolerant::Object { object, .. } => Kept::Object(object),
        Tolerant::Undecodable { metadata, error } => Kept::Skipped(metadata, Skipped::Undecodable(error)),
    };
    Some(Ok(match item {
        Err(e) => return Some(Err(e)),
        Ok(E::Init) => E::Init,
        Ok(E::InitDone) => E::InitDone,
        Ok(E::Delete(Tolerant::Object { object, .. })) => E::Delete(object),
        Ok(E::Delete(Tolerant::Undecodable { metadata, .. })) => E::Delete(stub(metadata)),
        Ok(E::InitApply(tolerant)) => match keep(tolerant) {
            Kept::Object(object) => E::InitApply(object),
            Kept::Skipped(metadata, why) => {
                report(&metadata, &why);
                return None;
            }
        },
        Ok(E::Apply(tolerant)) => match keep(tolerant) {
            Kept::Object(object) => E::Apply(object),
            Kept::Skipped(metadata, why) => {
                report(&metadata, &why);
                E::Delete(stub(metadata))
            }
        },
    }))
}

/// Probes a failing watch's kind until it answers (or the watch is gone or recovers by itself),
/// then wakes the watch from its backoff (`cache::retry`).
fn spawn_probe(api: Api<Tolerant>, token: std::sync::Weak<WatchToken>, wake: Arc<Notify>) {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(PROBE_INTERVAL).await;
            let Some(token) = token.upgrade() else { return };
            if !token.needs_probe() {
                return;
            }
            if api.list_metadata(&ListParams::default().limit(1)).await.is_ok() {
                token.probe_succeeded();
                wake.notify_one();
                return;
            }
        }
    });
}

#[cfg(test)]
mod tests;
