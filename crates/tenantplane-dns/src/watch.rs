//! Feeding the index from the host API server: one watch per kind, each
//! restricted to the host namespace (and, where the labels allow, to the tenant).
//! The index itself re-checks every object's identity.

use std::fmt::Debug;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Endpoints, Pod, Service};
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};
use kube::{Api, Client, Resource};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tenantplane_core::dns::TenantIndex;
use tenantplane_core::metadata::{LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY_VALUE};

use crate::SharedIndex;

/// Why a watch ended.
#[derive(Debug, thiserror::Error)]
pub enum WatchError {
    #[error("the {kind} watch ended")]
    Ended { kind: &'static str },
}

/// How one kind enters the index.
struct KindOps {
    kind: &'static str,
    apply: fn(&mut TenantIndex, &Value),
    delete: fn(&mut TenantIndex, &str),
    clear: fn(&mut TenantIndex),
}

fn write(index: &SharedIndex) -> std::sync::RwLockWriteGuard<'_, TenantIndex> {
    match index.write() {
        Ok(guard) => guard,
        Err(poisoned) => poisoned.into_inner(),
    }
}

async fn watch_kind<K>(
    api: Api<K>,
    config: watcher::Config,
    index: SharedIndex,
    ops: KindOps,
) -> Result<(), WatchError>
where
    K: Resource + Clone + Debug + DeserializeOwned + serde::Serialize + Send + 'static,
{
    let to_value = |object: &K| match serde_json::to_value(object) {
        Ok(value) => Some(value),
        Err(error) => {
            tracing::warn!(kind = ops.kind, %error, "cannot read a watched object");
            None
        }
    };
    let mut initial: Vec<Value> = Vec::new();
    let mut stream = watcher::watcher(api, config).default_backoff().boxed();
    loop {
        let event = match stream.try_next().await {
            Ok(Some(event)) => event,
            Ok(None) => return Err(WatchError::Ended { kind: ops.kind }),
            Err(error) => {
                // The backoff retries; the index keeps its last records meanwhile.
                tracing::warn!(kind = ops.kind, %error, "watch error");
                continue;
            }
        };
        match event {
            Event::Init => initial.clear(),
            Event::InitApply(object) => initial.extend(to_value(&object)),
            Event::InitDone => {
                // A relist replaces the kind at once, so readers never see half of it.
                let mut index = write(&index);
                (ops.clear)(&mut index);
                for object in initial.drain(..) {
                    (ops.apply)(&mut index, &object);
                }
                tracing::debug!(kind = ops.kind, services = index.service_count(), "listed");
            }
            Event::Apply(object) => {
                if let Some(value) = to_value(&object) {
                    (ops.apply)(&mut write(&index), &value);
                }
            }
            Event::Delete(object) => {
                if let Some(name) = object.meta().name.as_deref() {
                    (ops.delete)(&mut write(&index), name);
                }
            }
        }
    }
}

/// Watches the tenant's host Services and Pods and the host namespace's Endpoints
/// into `index`, until a watch ends (never, in practice: errors are retried).
pub async fn feed_index(client: Client, index: SharedIndex) -> Result<(), WatchError> {
    let (namespace, tenant) = {
        let guard = match index.read() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let t = guard.tenant();
        (t.host_namespace.clone(), t.tenant.clone())
    };
    let ours = watcher::Config::default().labels(&format!(
        "{LABEL_MANAGED_BY}={MANAGED_BY_VALUE},{LABEL_TENANT}={tenant}"
    ));
    let services = watch_kind(
        Api::<Service>::namespaced(client.clone(), &namespace),
        ours.clone(),
        index.clone(),
        KindOps {
            kind: "Service",
            apply: TenantIndex::apply_service,
            delete: TenantIndex::delete_service,
            clear: TenantIndex::clear_services,
        },
    );
    let pods = watch_kind(
        Api::<Pod>::namespaced(client.clone(), &namespace),
        ours,
        index.clone(),
        KindOps {
            kind: "Pod",
            apply: TenantIndex::apply_pod,
            delete: TenantIndex::delete_pod,
            clear: TenantIndex::clear_pods,
        },
    );
    // The host Endpoints controller does not copy our annotations; Endpoints count
    // only under the name of one of the tenant's Services.
    let endpoints = watch_kind(
        Api::<Endpoints>::namespaced(client, &namespace),
        watcher::Config::default(),
        index,
        KindOps {
            kind: "Endpoints",
            apply: TenantIndex::apply_endpoints,
            delete: TenantIndex::delete_endpoints,
            clear: TenantIndex::clear_endpoints,
        },
    );
    tokio::try_join!(services, pods, endpoints).map(|_| ())
}
