//! The tenant's namespaces, for kinds whose host copy depends on them: a
//! NetworkPolicy peer's `namespaceSelector` is evaluated against the tenant's
//! namespace labels, so a namespace created, deleted or relabelled re-syncs every
//! policy (see [`tenantplane_core::selectors`]).

use std::sync::Arc;

use futures::StreamExt;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::{self, Store};
use kube::runtime::watcher;
use kube::{Api, Client};
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::selectors::TenantNamespaces;

use super::{KindSyncer, tenant_watch};

/// Whether host copies of `group_kind` depend on the tenant's namespaces.
pub(super) fn needs_namespaces(group_kind: &GroupKind) -> bool {
    *group_kind == GroupKind::new("networking.k8s.io", "NetworkPolicy")
}

/// A cache of the tenant's Namespaces and the writer that fills it.
pub(super) fn namespace_cache() -> (
    reflector::store::Writer<DynamicObject>,
    Store<DynamicObject>,
) {
    let writer = reflector::store::Writer::new(namespace_resource());
    let store = writer.as_reader();
    (writer, store)
}

fn namespace_resource() -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Namespace"))
}

/// The cached namespaces as names and labels.
pub(super) fn tenant_namespaces(store: &Store<DynamicObject>) -> TenantNamespaces {
    store
        .state()
        .iter()
        .filter_map(|ns| {
            Some((
                ns.metadata.name.clone()?,
                ns.metadata.labels.clone().unwrap_or_default(),
            ))
        })
        .collect()
}

impl KindSyncer {
    /// Watches the tenant's Namespaces; every change re-plans every object of this
    /// kind (a full pass: policies are few, and a plan without a change writes nothing).
    pub(super) async fn watch_namespaces(
        self: Arc<Self>,
        tenant: Client,
        writer: reflector::store::Writer<DynamicObject>,
    ) {
        let api: Api<DynamicObject> = Api::all_with(tenant, &namespace_resource());
        let mut stream = reflector::reflector(writer, tenant_watch(api)).boxed();
        while let Some(event) = stream.next().await {
            match event {
                Ok(
                    watcher::Event::Apply(_) | watcher::Event::Delete(_) | watcher::Event::InitDone,
                ) => self.full_pass(),
                Ok(watcher::Event::Init | watcher::Event::InitApply(_)) => {}
                Err(err) => {
                    tracing::warn!(%err, kind = %self.group_kind, tenant = %self.ctx.target.tenant, "namespace watch failed; retrying");
                }
            }
        }
    }
}
