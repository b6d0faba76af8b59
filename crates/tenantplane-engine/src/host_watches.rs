//! One host watch per watched resource for every TenantCluster this process
//! serves. A watch per TenantCluster and kind grows as tenants x kinds on the host
//! API server; here each resource is watched once, cluster-wide and filtered by
//! the managed-by and kind labels, and its events are handed in memory to each
//! subscriber whose [`Interest`] they match (its host namespace and tenant label).
//!
//! A subscriber gets the watcher's own event sequence (`Init`, `InitApply`...,
//! `InitDone`, then `Apply`/`Delete`), so its store and event loop behave as with
//! a watch of its own: one that joins a running watch is replayed what the watch
//! already holds, and an object that leaves its interest (a label changed) is
//! delivered to it as deleted, as a label-selected watch would.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};

use futures::{Stream, StreamExt};
use kube::api::{ApiResource, DynamicObject};
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client};
use tenantplane_core::metadata::LABEL_TENANT;
use tenantplane_core::transform::TenantTarget;
use tokio::sync::mpsc;

/// Which objects of a shared watch one subscriber receives.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Interest {
    /// Objects in `namespace` labelled for `tenant` (one TenantCluster's copies).
    Tenant { namespace: String, tenant: String },
    /// Every object in `namespace`.
    Namespace(String),
}

impl Interest {
    /// One TenantCluster's host copies.
    pub fn copies_of(target: &TenantTarget) -> Self {
        Interest::Tenant {
            namespace: target.host_namespace.clone(),
            tenant: target.tenant.clone(),
        }
    }

    fn wants(&self, object: &DynamicObject) -> bool {
        let namespace = object.metadata.namespace.as_deref();
        match self {
            Interest::Tenant {
                namespace: wanted,
                tenant,
            } => {
                namespace == Some(wanted.as_str())
                    && object
                        .metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(LABEL_TENANT))
                        .is_some_and(|t| t == tenant)
            }
            Interest::Namespace(wanted) => namespace == Some(wanted.as_str()),
        }
    }
}

/// What a hub watches: one resource, optionally label-selected.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
struct HubKey {
    group: String,
    version: String,
    plural: String,
    selector: Option<String>,
}

/// The shared watches of one process, against one host API server.
#[derive(Clone)]
pub struct HostWatches {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    hubs: Mutex<HashMap<HubKey, Arc<Hub>>>,
}

type ObjectKey = (String, String);

struct Subscriber {
    interest: Interest,
    /// The subscriber's own store, when it keeps one.
    writer: Option<Writer<DynamicObject>>,
    /// Boxed: an unbounded channel allocates its slots 32 at a time, and an
    /// unboxed event would make each of thousands of idle channels cost ~14 KiB.
    events: mpsc::UnboundedSender<Box<Event<DynamicObject>>>,
}

#[derive(Default)]
struct HubState {
    next_id: u64,
    subscribers: HashMap<u64, Subscriber>,
    /// Everything the watch holds, as of its last complete list plus the events
    /// since: what a subscriber joining later is replayed.
    objects: BTreeMap<ObjectKey, DynamicObject>,
    /// Whether `objects` comes from a completed list.
    listed: bool,
    /// A (re)list in progress: what it has returned so far.
    listing: Option<BTreeMap<ObjectKey, DynamicObject>>,
}

struct Hub {
    state: Mutex<HubState>,
    task: Mutex<Option<tokio::task::JoinHandle<()>>>,
}

fn object_key(object: &DynamicObject) -> ObjectKey {
    (
        object.metadata.namespace.clone().unwrap_or_default(),
        object.metadata.name.clone().unwrap_or_default(),
    )
}

impl Subscriber {
    /// Delivers a list of `objects` (the ones it wants), complete when `done`.
    fn replay(&mut self, objects: &BTreeMap<ObjectKey, DynamicObject>, done: bool) {
        self.deliver(Event::Init);
        for object in objects.values() {
            if self.interest.wants(object) {
                self.deliver(Event::InitApply(object.clone()));
            }
        }
        if done {
            self.deliver(Event::InitDone);
        }
    }

    fn deliver(&mut self, event: Event<DynamicObject>) {
        if let Some(writer) = &mut self.writer {
            writer.apply_watcher_event(&event);
        }
        // A receiver gone means the subscription is being dropped; its removal follows.
        let _ = self.events.send(Box::new(event));
    }
}

impl HubState {
    /// Applies one event of the shared watch and hands it to every subscriber it
    /// concerns.
    fn dispatch(&mut self, event: Event<DynamicObject>) {
        match event {
            Event::Init => {
                self.listing = Some(BTreeMap::new());
                for subscriber in self.subscribers.values_mut() {
                    subscriber.deliver(Event::Init);
                }
            }
            Event::InitApply(object) => {
                for subscriber in self.subscribers.values_mut() {
                    if subscriber.interest.wants(&object) {
                        subscriber.deliver(Event::InitApply(object.clone()));
                    }
                }
                self.listing
                    .get_or_insert_with(BTreeMap::new)
                    .insert(object_key(&object), object);
            }
            Event::InitDone => {
                self.objects = self.listing.take().unwrap_or_default();
                self.listed = true;
                for subscriber in self.subscribers.values_mut() {
                    subscriber.deliver(Event::InitDone);
                }
            }
            Event::Apply(object) => {
                let before = self.objects.insert(object_key(&object), object.clone());
                for subscriber in self.subscribers.values_mut() {
                    if subscriber.interest.wants(&object) {
                        subscriber.deliver(Event::Apply(object.clone()));
                    } else if before
                        .as_ref()
                        .is_some_and(|b| subscriber.interest.wants(b))
                    {
                        // Left this subscriber's interest: gone, as far as it can see.
                        subscriber.deliver(Event::Delete(object.clone()));
                    }
                }
            }
            Event::Delete(object) => {
                let before = self.objects.remove(&object_key(&object));
                for subscriber in self.subscribers.values_mut() {
                    let wanted = subscriber.interest.wants(&object)
                        || before
                            .as_ref()
                            .is_some_and(|b| subscriber.interest.wants(b));
                    if wanted {
                        subscriber.deliver(Event::Delete(object.clone()));
                    }
                }
            }
        }
    }

    /// Adds a subscriber, replaying what the watch already holds for it.
    fn join(&mut self, mut subscriber: Subscriber) -> u64 {
        if let Some(listing) = &self.listing {
            // Mid-list: the rest of the list and its end follow as they arrive.
            subscriber.replay(listing, false);
        } else if self.listed {
            subscriber.replay(&self.objects, true);
        }
        // Not listed yet: the first list reaches it like everyone else.
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        self.subscribers.insert(id, subscriber);
        id
    }
}

/// One subscriber's events from a shared watch. Dropping it (or the stream from
/// [`Subscription::into_events`]) ends the subscription; the last one ends the
/// watch.
pub struct Subscription {
    events: mpsc::UnboundedReceiver<Box<Event<DynamicObject>>>,
    guard: SubscriptionGuard,
}

struct SubscriptionGuard {
    inner: Arc<Inner>,
    key: HubKey,
    id: u64,
}

impl Drop for SubscriptionGuard {
    fn drop(&mut self) {
        let mut hubs = self
            .inner
            .hubs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let Some(hub) = hubs.get(&self.key) else {
            return;
        };
        let empty = {
            let mut state = hub.state.lock().unwrap_or_else(PoisonError::into_inner);
            state.subscribers.remove(&self.id);
            state.subscribers.is_empty()
        };
        if empty {
            if let Some(task) = hub
                .task
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .take()
            {
                task.abort();
            }
            hubs.remove(&self.key);
        }
    }
}

impl Subscription {
    /// The subscriber's events, in the watcher's order; the subscription lasts as
    /// long as the stream.
    pub fn into_events(self) -> impl Stream<Item = Event<DynamicObject>> + Send + Unpin + 'static {
        let Subscription { events, guard, .. } = self;
        Box::pin(futures::stream::unfold(
            (events, guard),
            |(mut events, guard)| async move {
                let event = events.recv().await?;
                Some((*event, (events, guard)))
            },
        ))
    }
}

impl HostWatches {
    pub fn new(client: Client) -> Self {
        Self {
            inner: Arc::new(Inner {
                client,
                hubs: Mutex::new(HashMap::new()),
            }),
        }
    }

    /// Subscribes to the objects of `resource` matching `selector` (cluster-wide)
    /// that `interest` wants, starting the shared watch if this is its first
    /// subscriber. `store`, when given, is kept as a reflector would keep it, each
    /// event applied before it is sent. Must be called within a Tokio runtime.
    pub fn subscribe(
        &self,
        resource: &ApiResource,
        selector: Option<String>,
        interest: Interest,
        store: Option<Writer<DynamicObject>>,
    ) -> Subscription {
        let key = HubKey {
            group: resource.group.clone(),
            version: resource.version.clone(),
            plural: resource.plural.clone(),
            selector,
        };
        let (sender, events) = mpsc::unbounded_channel();
        let mut hubs = self
            .inner
            .hubs
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let hub = Arc::clone(hubs.entry(key.clone()).or_insert_with(|| {
            let hub = Arc::new(Hub {
                state: Mutex::new(HubState::default()),
                task: Mutex::new(None),
            });
            let api: Api<DynamicObject> = Api::all_with(self.inner.client.clone(), resource);
            let mut config = watcher::Config::default();
            if let Some(selector) = &key.selector {
                config = config.labels(selector);
            }
            let task = tokio::spawn(run(Arc::downgrade(&hub), api, config, key.plural.clone()));
            *hub.task.lock().unwrap_or_else(PoisonError::into_inner) = Some(task);
            hub
        }));
        let id = hub
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .join(Subscriber {
                interest,
                writer: store,
                events: sender,
            });
        drop(hubs);
        Subscription {
            events,
            guard: SubscriptionGuard {
                inner: Arc::clone(&self.inner),
                key,
                id,
            },
        }
    }

    /// How many shared watches are running (one per watched resource and selector).
    pub fn watches(&self) -> usize {
        self.inner
            .hubs
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .len()
    }
}

/// The shared watch of one hub, until its last subscriber leaves.
async fn run(
    hub: std::sync::Weak<Hub>,
    api: Api<DynamicObject>,
    config: watcher::Config,
    resource: String,
) {
    // Without managedFields: the hub and every subscriber's store hold each object,
    // and nothing reads them.
    let mut stream = watcher::watcher(api, config)
        .backoff(crate::kind_sync::watch_backoff())
        .modify(crate::kind_sync::drop_managed_fields)
        .boxed();
    while let Some(event) = stream.next().await {
        match event {
            Ok(event) => {
                let Some(hub) = hub.upgrade() else { return };
                hub.state
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .dispatch(event);
            }
            Err(err) => {
                tracing::warn!(%err, %resource, "shared host watch failed; retrying");
            }
        }
    }
}

#[cfg(test)]
#[path = "host_watches_tests.rs"]
mod tests;
