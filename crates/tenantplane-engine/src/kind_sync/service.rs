//! The Service path of a [`KindSyncer`]: the host copy is synced as any kind's,
//! then the tenant Service is made to carry the host copy's address (re-created
//! with its `clusterIP(s)`, updated with its `nodePort`s) and the host's load
//! balancer status flows back.
//!
//! A re-create deletes the tenant Service for a moment. That deletion is ours:
//! while a key is being re-created its tenant Service's absence never collects the
//! host copy, and a create that failed is retried from the remembered object.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};

use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::reflector::Store;
use kube::runtime::reflector::store::Writer;
use serde_json::Value;
use tenantplane_api::DecisionAction;
use tenantplane_core::services::address::{
    AddressPlan, Replacing, ServiceStep, cluster_ip, is_out_of_range, load_balancer_status,
    plan_address, refusal_fingerprint, service_step, without_allocations,
};

use super::fields::{put_status, str_at};
use super::{Key, KindSyncer, SyncError, post_params};
use crate::deletion::exactly;

/// A re-create in flight.
#[derive(Clone, Debug)]
struct Recreating {
    /// What to create (again, after a failed create).
    object: Value,
    /// The UID of the tenant Service it replaces (a cache may still show it).
    replaced_uid: Option<String>,
    /// The UID of the created Service, once created.
    created_uid: Option<String>,
    reason: String,
    /// The refusal fingerprint of the replaced Service, and the host's address.
    fingerprint: String,
    host_ip: String,
}

/// The Service path's state, built once per syncer.
pub(super) struct ServicePath {
    /// The host Endpoints of this tenant's Service copies, and (until the watch
    /// takes it) the writer that fills them.
    endpoints: Store<DynamicObject>,
    pub(super) endpoints_writer: Mutex<Option<Writer<DynamicObject>>>,
    recreating: Mutex<HashMap<Key, Recreating>>,
    /// Per key: the fingerprint of a tenant Service whose host address its API
    /// server refused. Not tried again while it holds.
    refused: Mutex<HashMap<Key, String>>,
}

impl ServicePath {
    pub(super) fn new() -> Self {
        let writer = Writer::new(ApiResource::from_gvk(&GroupVersionKind::gvk(
            "",
            "v1",
            "Endpoints",
        )));
        Self {
            endpoints: writer.as_reader(),
            endpoints_writer: Mutex::new(Some(writer)),
            recreating: Mutex::default(),
            refused: Mutex::default(),
        }
    }

    fn recreating(&self) -> std::sync::MutexGuard<'_, HashMap<Key, Recreating>> {
        self.recreating
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    fn refused(&self) -> std::sync::MutexGuard<'_, HashMap<Key, String>> {
        self.refused.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl KindSyncer {
    fn tenant_services(&self, namespace: &str) -> Api<DynamicObject> {
        Api::namespaced_with(self.ctx.tenant.clone(), namespace, &self.tenant_resource)
    }

    /// Syncs one tenant Service: host copy first, then the tenant side.
    pub(super) async fn sync_service(
        &self,
        path: &ServicePath,
        key: &Key,
    ) -> Result<(), SyncError> {
        let (tenant_obj, host_name, host_obj) = self.cached_pair(key)?;
        let replacing = path.recreating().get(key).map(|r| Replacing {
            replaced_uid: r.replaced_uid.clone(),
            created_uid: r.created_uid.clone(),
        });
        let tenant_uid = tenant_obj
            .as_ref()
            .map(|t| t.pointer("/metadata/uid").and_then(Value::as_str));
        match service_step(tenant_uid, replacing.as_ref()) {
            ServiceStep::CreateReplacement => {
                return self.create_replacement(path, key, &host_name).await;
            }
            ServiceStep::Wait => return Ok(()),
            ServiceStep::Collect => {
                self.ctx.service_cidr.clear(key);
                path.refused().remove(key);
                if let Some(host_obj) = host_obj {
                    self.collect(key, &host_name, &host_obj).await?;
                }
                return self.remove_tenant_endpoints(key).await;
            }
            ServiceStep::Sync { replaced } => {
                if replaced {
                    path.recreating().remove(key);
                }
            }
        }
        let Some(tenant) = tenant_obj else {
            return Ok(());
        };
        self.apply(key, &tenant, host_obj.clone()).await?;
        let Some(host) = host_obj else {
            // Created just now: its watch event brings it back with its address.
            return Ok(());
        };
        if !self.is_our_copy(key, &host) {
            return Ok(());
        }
        self.align_address(path, key, &tenant, &host, &host_name)
            .await?;
        if let Some(status) = load_balancer_status(&tenant, &host) {
            put_status(&self.tenant_services(&key.0), &tenant, status).await?;
        }
        self.sync_tenant_endpoints(key, &tenant, &host_name, &path.endpoints)
            .await
    }

    /// Makes the tenant Service carry the host copy's allocations.
    async fn align_address(
        &self,
        path: &ServicePath,
        key: &Key,
        tenant: &Value,
        host: &Value,
        host_name: &str,
    ) -> Result<(), SyncError> {
        let uid = str_at(tenant, "/metadata/uid");
        match plan_address(tenant, host) {
            AddressPlan::InSync => {
                path.refused().remove(key);
                self.ctx.service_cidr.clear(key);
                Ok(())
            }
            AddressPlan::Update { object, reason } => {
                let body: DynamicObject =
                    serde_json::from_value(object).map_err(|e| SyncError::Decode(e.to_string()))?;
                match self
                    .tenant_services(&key.0)
                    .replace(&key.1, &post_params(), &body)
                    .await
                {
                    Ok(_) => {
                        self.decide(DecisionAction::Update, key, uid, host_name, reason);
                        Ok(())
                    }
                    Err(kube::Error::Api(status)) if status.code == 422 => {
                        self.skip_once(
                            key,
                            uid,
                            host_name,
                            "node-ports",
                            format!(
                                "the tenant API server refused the host's node ports: {}",
                                status.message
                            ),
                        );
                        Ok(())
                    }
                    Err(source) => Err(SyncError::Api {
                        verb: "update the node ports of",
                        name: key.1.clone(),
                        source,
                    }),
                }
            }
            AddressPlan::Recreate { object, reason } => {
                let fingerprint = refusal_fingerprint(tenant, host);
                if path.refused().get(key) == Some(&fingerprint) {
                    return Ok(());
                }
                path.recreating().insert(
                    key.clone(),
                    Recreating {
                        object,
                        replaced_uid: uid.clone(),
                        created_uid: None,
                        reason,
                        fingerprint,
                        host_ip: cluster_ip(host).unwrap_or_default().to_owned(),
                    },
                );
                match self
                    .tenant_services(&key.0)
                    .delete(&key.1, &unchanged_since_read(tenant, uid))
                    .await
                {
                    Ok(_) => self.create_replacement(path, key, host_name).await,
                    // Gone meanwhile (404), or changed or replaced since our cache
                    // read it (409: the preconditions): never re-create from a stale
                    // copy; the watch brings the new version back.
                    Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => {
                        path.recreating().remove(key);
                        Ok(())
                    }
                    Err(source) => {
                        path.recreating().remove(key);
                        Err(SyncError::Api {
                            verb: "delete (to re-create with the host's address)",
                            name: key.1.clone(),
                            source,
                        })
                    }
                }
            }
        }
    }

    /// Creates the tenant Service of a re-create in flight. Refused the host's
    /// address, it creates the Service back without it, so the tenant keeps its
    /// Service, and records why once.
    async fn create_replacement(
        &self,
        path: &ServicePath,
        key: &Key,
        host_name: &str,
    ) -> Result<(), SyncError> {
        let Some(pending) = path.recreating().get(key).cloned() else {
            return Ok(());
        };
        let api = self.tenant_services(&key.0);
        let body: DynamicObject = serde_json::from_value(pending.object.clone())
            .map_err(|e| SyncError::Decode(e.to_string()))?;
        let refusal = match api.create(&post_params(), &body).await {
            Ok(created) => {
                let created_uid = created.metadata.uid.clone();
                if let Some(entry) = path.recreating().get_mut(key) {
                    entry.created_uid = created_uid.clone();
                }
                self.decide(
                    DecisionAction::Update,
                    key,
                    created_uid,
                    host_name,
                    pending.reason,
                );
                return Ok(());
            }
            Err(kube::Error::Api(status)) if status.code == 422 => status.message,
            // The tenant made a Service of that name meanwhile: theirs stands.
            Err(kube::Error::Api(status)) if status.code == 409 => {
                path.recreating().remove(key);
                return Ok(());
            }
            Err(source) => {
                return Err(SyncError::Api {
                    verb: "re-create",
                    name: key.1.clone(),
                    source,
                });
            }
        };
        // Refused: remember it (no loop), put the tenant's Service back, and say why.
        path.refused()
            .insert(key.clone(), pending.fingerprint.clone());
        let restored = without_allocations(&pending.object);
        if let Some(entry) = path.recreating().get_mut(key) {
            entry.object = restored.clone();
        }
        let body: DynamicObject =
            serde_json::from_value(restored).map_err(|e| SyncError::Decode(e.to_string()))?;
        let created = match api.create(&post_params(), &body).await {
            Ok(created) => created,
            Err(kube::Error::Api(status)) if status.code == 409 => {
                path.recreating().remove(key);
                return Ok(());
            }
            Err(source) => {
                return Err(SyncError::Api {
                    verb: "create back",
                    name: key.1.clone(),
                    source,
                });
            }
        };
        if let Some(entry) = path.recreating().get_mut(key) {
            entry.created_uid = created.metadata.uid.clone();
        }
        let reason = format!(
            "the tenant API server refused the host's ClusterIP {}: {refusal}; the tenant \
             Service keeps an address of its own, which routes nowhere on the host",
            pending.host_ip
        );
        if is_out_of_range(&refusal) {
            self.ctx.service_cidr.set(
                key.clone(),
                format!(
                    "tenant Service {}/{} has host ClusterIP {}, outside the tenant API \
                     server's service CIDR ({refusal}); start the tenant API server with the \
                     host's service CIDR",
                    key.0, key.1, pending.host_ip
                ),
            );
        }
        self.skip_once(
            key,
            created.metadata.uid.clone(),
            host_name,
            &pending.fingerprint,
            reason,
        );
        Ok(())
    }
}

/// Deletes only the very version the re-create was planned from: an update the
/// tenant made meanwhile is never lost to a re-create from a stale copy.
fn unchanged_since_read(tenant: &Value, uid: Option<String>) -> kube::api::DeleteParams {
    let mut params = exactly(uid);
    if let Some(preconditions) = params.preconditions.as_mut() {
        preconditions.resource_version = str_at(tenant, "/metadata/resourceVersion");
    }
    params
}
