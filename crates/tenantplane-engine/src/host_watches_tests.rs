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
    events: mpsc::UnboundedReceiver<Box<Event<DynamicObject>>>,
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
            seen.push(match *event {
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
