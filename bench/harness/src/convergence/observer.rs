//! The observer: watches on the parents and their children in a namespace, recording when each
//! parent converged (its status says done and every child it needs has been seen).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use futures::StreamExt;
use k8s_openapi::api::apps::v1::StatefulSet;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Service;
use kube::Client;
use kube::api::{Api, DynamicObject};
use kube::core::PartialObjectMeta;
use kube::runtime::{WatchStreamExt, watcher};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::convergence::contenders::Contender;

/// The facts a parent needs, one bit each.
const STATUS: u8 = 1;
const SERVICE: u8 = 2;
const STATEFULSET: u8 = 4;
const JOB: u8 = 8;

/// What has been seen, per parent name.
#[derive(Default)]
struct Seen {
    /// The facts seen so far.
    facts: HashMap<String, u8>,
    /// When the last needed fact arrived.
    converged: HashMap<String, Instant>,
    /// How many of each fact, for the message when it does not converge.
    counts: [usize; 4],
}

impl Seen {
    fn record(&mut self, name: &str, fact: u8, needed: u8) {
        let facts = self.facts.entry(name.to_owned()).or_default();
        if *facts & fact != 0 {
            return;
        }
        *facts |= fact;
        self.counts[fact.trailing_zeros() as usize] += 1;
        if *facts & needed == needed {
            self.converged.entry(name.to_owned()).or_insert_with(Instant::now);
        }
    }
}

type Shared = Arc<Mutex<Seen>>;

fn lock(seen: &Shared) -> std::sync::MutexGuard<'_, Seen> {
    seen.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The watches of one namespace.
pub struct Observer {
    seen: Shared,
    tasks: Vec<JoinHandle<()>>,
}

impl Observer {
    /// Starts the watches (metadata only for the children) and waits until all have listed.
    pub async fn start(client: &Client, ns: &str, contender: &'static dyn Contender) -> Result<Observer> {
        let seen = Shared::default();
        let needed = STATUS | SERVICE | STATEFULSET | if contender.runs_backup() { JOB } else { 0 };
        let (ready_tx, mut ready_rx) = mpsc::unbounded_channel::<()>();
        let mut tasks = Vec::new();

        let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, &contender.parent().resource());
        let (s, ready) = (seen.clone(), ready_tx.clone());
        tasks.push(tokio::spawn(async move {
            let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
            while let Some(event) = events.next().await {
                match event {
                    Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                        if contender.parent_done(&o)
                            && let Some(name) = &o.metadata.name
                        {
                            lock(&s).record(name, STATUS, needed);
                        }
                    }
                    Ok(watcher::Event::InitDone) => {
                        let _ = ready.send(());
                    }
                    _ => {}
                }
            }
        }));
        tasks.push(watch_children::<Service>(
            client,
            ns,
            seen.clone(),
            ready_tx.clone(),
            SERVICE,
            needed,
        ));
        tasks.push(watch_children::<StatefulSet>(
            client,
            ns,
            seen.clone(),
            ready_tx.clone(),
            STATEFULSET,
            needed,
        ));
        if needed & JOB != 0 {
            tasks.push(watch_children::<Job>(client, ns, seen.clone(), ready_tx, JOB, needed));
        }
        for _ in 0..tasks.len() {
            tokio::time::timeout(Duration::from_secs(30), ready_rx.recv())
                .await
                .context("watches did not sync within 30s")?;
        }
        Ok(Observer { seen, tasks })
    }

    /// Waits until `n` parents are converged; returns when each one was. Gives up after
    /// `timeout`, after 120 s without progress, or when `alive` reports the contender dead.
    pub async fn wait_all(
        &self,
        n: usize,
        start: Instant,
        timeout: Duration,
        alive: &mut (dyn FnMut() -> Option<String> + Send),
    ) -> Result<HashMap<String, Instant>> {
        let (mut progress, mut last_count) = (Instant::now(), 0);
        loop {
            let done = lock(&self.seen).converged.len();
            if done >= n {
                return Ok(lock(&self.seen).converged.clone());
            }
            if let Some(dead) = alive() {
                bail!("{dead}; {done}/{n} converged");
            }
            if done > last_count {
                (progress, last_count) = (Instant::now(), done);
            }
            if start.elapsed() > timeout || progress.elapsed() > Duration::from_secs(120) {
                let [status, services, statefulsets, jobs] = lock(&self.seen).counts;
                bail!(
                    "after {:?} ({:?} without progress): {done}/{n} converged (status {status}, services \
                     {services}, statefulsets {statefulsets}, jobs {jobs})",
                    start.elapsed(),
                    progress.elapsed(),
                );
            }
            tokio::time::sleep(Duration::from_millis(25)).await;
        }
    }
}

impl Drop for Observer {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Records when a child labelled `app=<parent>` was first seen.
fn watch_children<K>(
    client: &Client,
    ns: &str,
    seen: Shared,
    ready: mpsc::UnboundedSender<()>,
    fact: u8,
    needed: u8,
) -> JoinHandle<()>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<PartialObjectMeta<K>> = Api::namespaced(client.clone(), ns);
    tokio::spawn(async move {
        let mut events = watcher(api, watcher::Config::default()).default_backoff().boxed();
        while let Some(event) = events.next().await {
            match event {
                Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) => {
                    if let Some(app) = o.metadata.labels.as_ref().and_then(|l| l.get("app")) {
                        lock(&seen).record(app, fact, needed);
                    }
                }
                Ok(watcher::Event::InitDone) => {
                    let _ = ready.send(());
                }
                _ => {}
            }
        }
    })
}

/// Waits until `n` objects of kind K carrying `label` (`key=value`) exist in `ns`, by a watch
/// (not a LIST every few ms: at N = 10,000 the polling itself would load the API server).
pub async fn wait_labelled<K>(client: &Client, ns: &str, label: &str, n: usize, timeout: Duration) -> Result<()>
where
    K: kube::Resource<DynamicType = (), Scope = kube::core::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let api: Api<PartialObjectMeta<K>> = Api::namespaced(client.clone(), ns);
    let mut events = watcher(api, watcher::Config::default().labels(label))
        .default_backoff()
        .boxed();
    let mut names = std::collections::HashSet::new();
    let wait = async {
        while let Some(event) = events.next().await {
            if let Ok(watcher::Event::Apply(o) | watcher::Event::InitApply(o)) = event
                && let Some(name) = o.metadata.name
            {
                names.insert(name);
                if names.len() >= n {
                    return true;
                }
            }
        }
        false
    };
    match tokio::time::timeout(timeout, wait).await {
        Ok(true) => Ok(()),
        _ => bail!("{}/{n} objects labelled {label} after {timeout:?}", names.len()),
    }
}
