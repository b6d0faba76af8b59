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
    events: mpsc::UnboundedSender<Event<DynamicObject>>,
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
        let _ = self.events.send(event);
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
    events: mpsc::UnboundedReceiver<Event<DynamicObject>>,
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
                Some((event, (events, guard)))
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
    let mut stream = watcher::watcher(api, config)
        .backoff(crate::kind_sync::watch_backoff())
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
mod tests {
    use super::*;
    use futures::FutureExt;
    use kube::api::GroupVersionKind;
    use kube::runtime::reflector::Store;
    use serde_json::json;

    fn configmap(namespace: &str, name: &str, tenant: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"namespace": namespace, "name": name, "labels": {LABEL_TENANT: tenant}}
        }))
        .unwrap()
    }

    fn resource() -> ApiResource {
        ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "ConfigMap"))
    }

    struct Probe {
        store: Store<DynamicObject>,
        events: mpsc::UnboundedReceiver<Event<DynamicObject>>,
    }

    fn subscriber(interest: Interest) -> (Subscriber, Probe) {
        let writer = Writer::new(resource());
        let store = writer.as_reader();
        let (sender, events) = mpsc::unbounded_channel();
        (
            Subscriber {
                interest,
                writer: Some(writer),
                events: sender,
            },
            Probe { store, events },
        )
    }

    fn tenant(namespace: &str, tenant: &str) -> Interest {
        Interest::Tenant {
            namespace: namespace.into(),
            tenant: tenant.into(),
        }
    }

    impl Probe {
        fn names(&self) -> Vec<String> {
            let mut names: Vec<String> = self
                .store
                .state()
                .iter()
                .filter_map(|o| o.metadata.name.clone())
                .collect();
            names.sort();
            names
        }

        /// The events received so far, as `kind name`.
        fn drain(&mut self) -> Vec<String> {
            let mut seen = Vec::new();
            while let Ok(event) = self.events.try_recv() {
                seen.push(match event {
                    Event::Init => "Init".to_owned(),
                    Event::InitDone => "InitDone".to_owned(),
                    Event::InitApply(o) => format!("InitApply {}", o.metadata.name.unwrap()),
                    Event::Apply(o) => format!("Apply {}", o.metadata.name.unwrap()),
                    Event::Delete(o) => format!("Delete {}", o.metadata.name.unwrap()),
                });
            }
            seen
        }
    }

    fn listed(state: &mut HubState, objects: Vec<DynamicObject>) {
        state.dispatch(Event::Init);
        for o in objects {
            state.dispatch(Event::InitApply(o));
        }
        state.dispatch(Event::InitDone);
    }

    #[test]
    fn each_subscriber_sees_only_its_namespace_and_tenant() {
        let mut state = HubState::default();
        let (a, mut probe_a) = subscriber(tenant("ns-a", "a"));
        let (b, mut probe_b) = subscriber(tenant("ns-a", "b"));
        let (all, mut probe_all) = subscriber(Interest::Namespace("ns-a".into()));
        state.join(a);
        state.join(b);
        state.join(all);
        listed(
            &mut state,
            vec![
                configmap("ns-a", "a1", "a"),
                configmap("ns-a", "b1", "b"),
                configmap("ns-b", "a-elsewhere", "a"),
            ],
        );
        state.dispatch(Event::Apply(configmap("ns-a", "a2", "a")));
        assert_eq!(probe_a.names(), ["a1", "a2"]);
        assert_eq!(probe_b.names(), ["b1"]);
        assert_eq!(probe_all.names(), ["a1", "a2", "b1"]);
        assert_eq!(
            probe_a.drain(),
            ["Init", "InitApply a1", "InitDone", "Apply a2"]
        );
        assert_eq!(probe_b.drain(), ["Init", "InitApply b1", "InitDone"]);
        assert_eq!(probe_all.drain().len(), 5);
        assert!(probe_a.store.wait_until_ready().now_or_never().is_some());
    }

    #[test]
    fn a_late_subscriber_is_replayed_what_the_watch_holds() {
        let mut state = HubState::default();
        listed(
            &mut state,
            vec![configmap("ns", "one", "t"), configmap("ns", "other", "u")],
        );
        state.dispatch(Event::Apply(configmap("ns", "two", "t")));
        state.dispatch(Event::Delete(configmap("ns", "one", "t")));
        let (late, mut probe) = subscriber(tenant("ns", "t"));
        state.join(late);
        assert_eq!(probe.names(), ["two"]);
        assert_eq!(probe.drain(), ["Init", "InitApply two", "InitDone"]);
        assert!(probe.store.wait_until_ready().now_or_never().is_some());
    }

    #[test]
    fn a_subscriber_joining_mid_list_gets_the_rest_of_it() {
        let mut state = HubState::default();
        state.dispatch(Event::Init);
        state.dispatch(Event::InitApply(configmap("ns", "first", "t")));
        let (mid, mut probe) = subscriber(tenant("ns", "t"));
        state.join(mid);
        assert!(probe.store.wait_until_ready().now_or_never().is_none());
        state.dispatch(Event::InitApply(configmap("ns", "second", "t")));
        state.dispatch(Event::InitDone);
        assert_eq!(probe.names(), ["first", "second"]);
        assert_eq!(
            probe.drain(),
            ["Init", "InitApply first", "InitApply second", "InitDone"]
        );
    }

    #[test]
    fn a_relist_replaces_what_each_subscriber_holds() {
        let mut state = HubState::default();
        let (s, mut probe) = subscriber(tenant("ns", "t"));
        state.join(s);
        listed(
            &mut state,
            vec![configmap("ns", "kept", "t"), configmap("ns", "gone", "t")],
        );
        listed(&mut state, vec![configmap("ns", "kept", "t")]);
        assert_eq!(probe.names(), ["kept"]);
        let (late, late_probe) = subscriber(tenant("ns", "t"));
        state.join(late);
        assert_eq!(late_probe.names(), ["kept"]);
        assert_eq!(probe.drain().last().map(String::as_str), Some("InitDone"));
    }

    #[test]
    fn an_object_relabelled_to_another_tenant_moves_between_subscribers() {
        let mut state = HubState::default();
        let (a, mut probe_a) = subscriber(tenant("ns", "a"));
        let (b, mut probe_b) = subscriber(tenant("ns", "b"));
        state.join(a);
        state.join(b);
        listed(&mut state, vec![configmap("ns", "x", "a")]);
        probe_a.drain();
        probe_b.drain();
        state.dispatch(Event::Apply(configmap("ns", "x", "b")));
        assert!(probe_a.names().is_empty());
        assert_eq!(probe_b.names(), ["x"]);
        assert_eq!(probe_a.drain(), ["Delete x"]);
        assert_eq!(probe_b.drain(), ["Apply x"]);
        // Its deletion reaches only the subscriber that could see it.
        state.dispatch(Event::Delete(configmap("ns", "x", "b")));
        assert!(probe_a.drain().is_empty());
        assert_eq!(probe_b.drain(), ["Delete x"]);
    }
}
