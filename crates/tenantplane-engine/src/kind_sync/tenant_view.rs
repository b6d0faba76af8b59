//! What makes a host Pod work and look right from the tenant: its service-account
//! tokens (requested from the tenant API server, kept in a host Secret, refreshed
//! before expiry), and the tenant Node it is bound to (standing for its host node,
//! per the TenantCluster's node mode).
//!
//! Stays a little over 500 lines: the two tenant-side views of a host Pod (tokens,
//! Node) are one concern; splitting them would gain little.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams, Patch, PatchParams};
use serde_json::Value;
use tenantplane_api::{DecisionAction, HostTarget, NodeMode, TenantObjectRef};
use tenantplane_core::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use tenantplane_core::pods::host_pod::token_secret_name;
use tenantplane_core::pods::node::{
    host_node_of, is_mirrored_node, is_schedulable, node_status_update,
};
use tenantplane_core::pods::tokens::{
    is_token_secret_of, needs_tokens, refresh_after, token_secret,
};
use tenantplane_core::pods::{HostPod, NodeView};

use super::dependency_copy::DependencyState;
use super::fields::{get_value, put_status, str_at};
use super::pod_path::PodPath;
use super::{Key, KindSyncer, SyncError, post_params, typed_value};
use crate::deletion::{delete_exact, exactly};

fn core(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", kind))
}

fn unix_now() -> i64 {
    k8s_openapi::jiff::Timestamp::now().as_second()
}

impl KindSyncer {
    fn host_secrets(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.ctx.host.clone(),
            &self.ctx.target.host_namespace,
            &core("Secret"),
        )
    }

    /// Makes sure the host Pod's token Secret holds fresh tokens for every projected
    /// token of the tenant Pod, and queues the Pod again for the next refresh.
    pub(super) async fn ensure_tokens(
        &self,
        key: &Key,
        tenant_pod: &Value,
        built: &HostPod,
    ) -> Result<DependencyState, SyncError> {
        if built.tokens.is_empty() {
            return Ok(DependencyState::Ready);
        }
        let name = token_secret_name(&self.ctx.target, &key.0, &key.1);
        let secrets = self.host_secrets();
        let observed = get_value(&secrets, &core("Secret"), &name).await?;
        if let Some(existing) = &observed
            && !is_token_secret_of(&self.ctx.target, &key.0, &key.1, existing)
        {
            return Ok(DependencyState::Waiting(format!(
                "the host Secret {name} for its service-account tokens is not tenantplane's; it is never touched"
            )));
        }
        let now = unix_now();
        if !needs_tokens(observed.as_ref(), &built.tokens, now) {
            self.requeue_for_refresh(key, observed.as_ref(), now);
            return Ok(DependencyState::Ready);
        }
        let accounts: Api<ServiceAccount> = Api::namespaced(self.ctx.tenant.clone(), &key.0);
        let mut values = BTreeMap::new();
        for token in &built.tokens {
            let request = TokenRequest {
                spec: TokenRequestSpec {
                    audiences: token.audience.iter().cloned().collect(),
                    expiration_seconds: Some(token.expiration_seconds),
                    bound_object_ref: Some(BoundObjectReference {
                        api_version: Some("v1".into()),
                        kind: Some("Pod".into()),
                        name: Some(key.1.clone()),
                        uid: str_at(tenant_pod, "/metadata/uid"),
                    }),
                },
                ..TokenRequest::default()
            };
            let issued = match accounts
                .create_token_request(&built.service_account, &post_params(), &request)
                .await
            {
                Ok(issued) => issued,
                Err(kube::Error::Api(status)) if status.code == 404 => {
                    return Ok(DependencyState::Waiting(format!(
                        "its ServiceAccount {}/{} does not exist in the tenant",
                        key.0, built.service_account
                    )));
                }
                Err(source) => {
                    return Err(SyncError::Api {
                        verb: "request a token for",
                        name: built.service_account.clone(),
                        source,
                    });
                }
            };
            let Some(status) = issued.status else {
                return Err(SyncError::Decode(
                    "the tenant API server issued no token".into(),
                ));
            };
            values.insert(token.key.clone(), status.token);
        }
        let mut desired = token_secret(
            &self.ctx.target,
            &key.0,
            &key.1,
            &built.tokens,
            &values,
            now,
        );
        let refreshing = observed.is_some();
        if let (Some(existing), Some(meta)) = (
            &observed,
            desired.get_mut("metadata").and_then(Value::as_object_mut),
        ) {
            meta.insert(
                "resourceVersion".into(),
                existing
                    .pointer("/metadata/resourceVersion")
                    .cloned()
                    .unwrap_or(Value::Null),
            );
        }
        let body: DynamicObject =
            serde_json::from_value(desired).map_err(|e| SyncError::Decode(e.to_string()))?;
        let waited = self.write_budget().await;
        let result = if refreshing {
            self.count_write("update");
            secrets.replace(&name, &post_params(), &body).await
        } else {
            self.count_write("create");
            secrets.create(&post_params(), &body).await
        };
        result.map_err(|source| SyncError::Api {
            verb: "write",
            name: name.clone(),
            source,
        })?;
        let fields: Vec<&str> = built.tokens.iter().map(|t| t.field.as_str()).collect();
        self.ctx.decisions.send(
            if refreshing { DecisionAction::Update } else { DecisionAction::Create },
            "v1",
            "Secret",
            TenantObjectRef { namespace: key.0.clone(), name: key.1.clone(), uid: str_at(tenant_pod, "/metadata/uid") },
            HostTarget { namespace: self.ctx.target.host_namespace.clone(), name },
            format!(
                "{} service-account token(s) of {}/{} for Pod {}/{} ({}), requested from the tenant API server and bound to the Pod{waited}",
                if refreshing { "refreshed" } else { "issued" },
                key.0,
                built.service_account,
                key.0,
                key.1,
                fields.join(", ")
            ),
        );
        let refresh_at = refresh_after(now, &built.tokens);
        self.queue_after(key, refresh_at - now);
        Ok(DependencyState::Ready)
    }

    fn requeue_for_refresh(&self, key: &Key, observed: Option<&Value>, now: i64) {
        let after = observed
            .and_then(|s| s.pointer("/metadata/annotations"))
            .and_then(|a| a.get(tenantplane_core::pods::tokens::ANNOTATION_REFRESH_AFTER))
            .and_then(Value::as_str)
            .and_then(|v| v.parse::<i64>().ok());
        if let Some(after) = after {
            self.queue_after(key, after - now);
        }
    }

    fn queue_after(&self, key: &Key, seconds: i64) {
        let delay = Duration::from_secs(u64::try_from(seconds.max(1)).unwrap_or(1));
        self.requeue_after(key, delay);
    }

    /// Deletes the token Secret of a Pod that is gone from the host.
    pub(super) async fn delete_tokens(&self, key: &Key) -> Result<(), SyncError> {
        let name = token_secret_name(&self.ctx.target, &key.0, &key.1);
        let secrets = self.host_secrets();
        let Some(existing) = get_value(&secrets, &core("Secret"), &name).await? else {
            return Ok(());
        };
        if !is_token_secret_of(&self.ctx.target, &key.0, &key.1, &existing) {
            return Ok(());
        }
        let params = exactly(str_at(&existing, "/metadata/uid"));
        self.count_write("delete");
        match delete_exact(&secrets, &name, &params).await {
            Ok(_) => Ok(()),
            Err(source) => Err(SyncError::Api {
                verb: "delete",
                name,
                source,
            }),
        }
    }

    fn node_view(&self) -> &NodeView {
        &self.ctx.pods.nodes
    }

    fn tenant_nodes(&self) -> Api<DynamicObject> {
        Api::all_with(self.ctx.tenant.clone(), &core("Node"))
    }

    /// Binds the tenant Pod to the tenant Node standing for the host node its host
    /// Pod runs on (creating that Node first). Returns whether it wrote.
    pub(super) async fn bind_to_tenant_node(
        &self,
        path: &PodPath,
        key: &Key,
        tenant_pod: &Value,
        host_pod: &Value,
    ) -> Result<bool, SyncError> {
        let Some(host_node) = str_at(host_pod, "/spec/nodeName").filter(|n| !n.is_empty()) else {
            return Ok(false);
        };
        if tenant_pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
        {
            return Ok(false);
        }
        let _nodes = path.nodes.lock().await;
        let node = self.ensure_tenant_node(&host_node).await?;
        let binding = serde_json::json!({"apiVersion": "v1", "kind": "Binding",
            "metadata": {"name": key.1, "namespace": key.0, "uid": str_at(tenant_pod, "/metadata/uid")},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node}});
        let body = serde_json::to_vec(&binding).map_err(|e| SyncError::Decode(e.to_string()))?;
        let request = http::Request::post(format!(
            "/api/v1/namespaces/{}/pods/{}/binding",
            key.0, key.1
        ))
        .header(http::header::CONTENT_TYPE, "application/json")
        .body(body)
        .map_err(|e| SyncError::Decode(e.to_string()))?;
        match self.ctx.tenant.request_text(request).await {
            Ok(_) => Ok(true),
            // Bound meanwhile (409): the watch brings the bound Pod.
            Err(kube::Error::Api(status)) if status.code == 409 => Ok(false),
            Err(source) => Err(SyncError::Api {
                verb: "bind",
                name: key.1.clone(),
                source,
            }),
        }
    }

    /// Creates the tenant Node for host node `host_name` if it is missing, and
    /// brings it in line with the host node. Returns the tenant Node's name.
    async fn ensure_tenant_node(&self, host_name: &str) -> Result<String, SyncError> {
        let host_node = self.host_node(host_name).await;
        self.ensure_tenant_node_from(host_name, host_node.as_ref())
            .await
    }

    async fn ensure_tenant_node_from(
        &self,
        host_name: &str,
        host_node: Option<&Value>,
    ) -> Result<String, SyncError> {
        let view = self.node_view();
        let name = view.tenant_node_name(host_name);
        let nodes = self.tenant_nodes();
        let existing = match get_value(&nodes, &core("Node"), &name).await? {
            Some(n) => n,
            None => {
                let body: DynamicObject =
                    serde_json::from_value(view.tenant_node(host_name, host_node))
                        .map_err(|e| SyncError::Decode(e.to_string()))?;
                match nodes.create(&post_params(), &body).await {
                    Ok(created) => typed_value(&created, &core("Node"))?,
                    Err(kube::Error::Api(status)) if status.code == 409 => return Ok(name),
                    Err(source) => {
                        return Err(SyncError::Api {
                            verb: "create",
                            name,
                            source,
                        });
                    }
                }
            }
        };
        self.refresh_tenant_node(&nodes, &existing, host_name, host_node)
            .await?;
        Ok(name)
    }

    /// Brings a tenant Node tenantplane made in line with its host node: labels
    /// from the allow-list only (a Node made by an older version loses the rest)
    /// and the scrubbed status. Writes only what differs.
    async fn refresh_tenant_node(
        &self,
        nodes: &Api<DynamicObject>,
        tenant: &Value,
        host_name: &str,
        host: Option<&Value>,
    ) -> Result<(), SyncError> {
        if !is_mirrored_node(tenant) {
            return Ok(());
        }
        let view = self.node_view();
        let name = str_at(tenant, "/metadata/name").unwrap_or_default();
        let wanted = view.tenant_node(host_name, host);
        let current_labels = tenant.pointer("/metadata/labels");
        let wanted_labels = wanted.pointer("/metadata/labels");
        let mut tenant = tenant.clone();
        if current_labels != wanted_labels {
            let mut labels: serde_json::Map<String, Value> = current_labels
                .and_then(Value::as_object)
                .map(|l| l.keys().map(|k| (k.clone(), Value::Null)).collect())
                .unwrap_or_default();
            if let Some(w) = wanted_labels.and_then(Value::as_object) {
                labels.extend(w.clone());
            }
            let patch = serde_json::json!({"metadata": {"labels": labels}});
            let patched = nodes
                .patch(&name, &PatchParams::default(), &Patch::Merge(patch))
                .await
                .map_err(|source| SyncError::Api {
                    verb: "relabel",
                    name: name.clone(),
                    source,
                })?;
            tenant = typed_value(&patched, &core("Node"))?;
        }
        let desired = view.node_status(host.and_then(|h| h.get("status")));
        let Some(status) = node_status_update(tenant.get("status"), &desired) else {
            return Ok(());
        };
        put_status(nodes, &tenant, status).await?;
        Ok(())
    }

    /// Whether the tenant API server has a Pod bound to tenant Node `name`.
    async fn has_bound_pods(&self, name: &str) -> Result<bool, SyncError> {
        let pods: Api<DynamicObject> = Api::all_with(self.ctx.tenant.clone(), &core("Pod"));
        let bound = ListParams::default()
            .fields(&format!("spec.nodeName={name}"))
            .limit(1);
        let list = pods
            .list_metadata(&bound)
            .await
            .map_err(|source| SyncError::Api {
                verb: "list",
                name: format!("pods on {name}"),
                source,
            })?;
        Ok(!list.items.is_empty())
    }

    /// The host node, when it exists and tenantplane may read it.
    async fn host_node(&self, name: &str) -> Option<Value> {
        let nodes: Api<Node> = Api::all(self.ctx.host.clone());
        match nodes.get_opt(name).await {
            Ok(node) => node.and_then(|n| serde_json::to_value(n).ok()),
            Err(err) => {
                tracing::debug!(%err, node = name, "host node not readable; its tenant Node shows no status");
                None
            }
        }
    }

    /// Every host node, for `scheduled` mode.
    pub(super) async fn host_nodes(&self) -> Result<Vec<Value>, SyncError> {
        let nodes: Api<Node> = Api::all(self.ctx.host.clone());
        let list = nodes
            .list(&ListParams::default())
            .await
            .map_err(|source| SyncError::Api {
                verb: "list",
                name: "nodes".into(),
                source,
            })?;
        list.items
            .into_iter()
            .map(|n| serde_json::to_value(n).map_err(|e| SyncError::Decode(e.to_string())))
            .collect()
    }

    /// In `scheduled` mode: the host node a tenant Pod is pinned to, or why it
    /// waits. `Ok(None)` in the other modes (the host scheduler places Pods).
    pub(super) async fn scheduled_host_node(
        &self,
        tenant_pod: &Value,
    ) -> Result<Option<Result<String, String>>, SyncError> {
        let view = self.node_view();
        if view.mode != NodeMode::Scheduled {
            return Ok(None);
        }
        let Some(node) = str_at(tenant_pod, "/spec/nodeName").filter(|n| !n.is_empty()) else {
            return Ok(Some(Err(
                "waits to be scheduled: in the scheduled node mode the tenant binds its Pods to its Nodes (spec.nodeName or its own scheduler), and this Pod is not bound yet".into(),
            )));
        };
        let hosts = self.host_nodes().await?;
        let names: Vec<String> = hosts
            .iter()
            .filter_map(|h| str_at(h, "/metadata/name"))
            .collect();
        Ok(Some(
            host_node_of(view, &node, names.iter().map(String::as_str)).ok_or_else(|| {
                format!(
                    "waits: it is bound to Node {node}, which is not one of the Nodes tenantplane made for this TenantCluster (the scheduled node mode syncs only Pods bound to those)"
                )
            }),
        ))
    }

    /// Tenant Nodes tenantplane made: refreshed while a tenant Pod is bound to them
    /// (in `scheduled` mode also while their host node is schedulable, created if
    /// missing), removed otherwise.
    pub(super) async fn collect_nodes(&self, path: &PodPath) -> Result<(), SyncError> {
        let _nodes = path.nodes.lock().await;
        let view = self.node_view();
        let used: BTreeSet<String> = self
            .tenant_store
            .state()
            .iter()
            .filter_map(|p| typed_value(p, &self.tenant_resource).ok())
            .filter_map(|p| str_at(&p, "/spec/nodeName"))
            .collect();
        // Tenant Node name -> host node (with the host node when listed).
        let mut hosts: BTreeMap<String, (String, Option<Value>)> = self
            .host_store
            .state()
            .iter()
            .filter_map(|p| p.data.pointer("/spec/nodeName").and_then(Value::as_str))
            .filter(|n| !n.is_empty())
            .map(|n| (view.tenant_node_name(n), (n.to_owned(), None)))
            .collect();
        let mut wanted = BTreeSet::new();
        if view.mode == NodeMode::Scheduled {
            for host in self.host_nodes().await? {
                let Some(name) = str_at(&host, "/metadata/name") else {
                    continue;
                };
                let tenant_name = view.tenant_node_name(&name);
                if is_schedulable(&host) {
                    wanted.insert(tenant_name.clone());
                }
                hosts.insert(tenant_name, (name, Some(host)));
            }
        }
        let nodes = self.tenant_nodes();
        let mirrored = nodes
            .list(&ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")))
            .await
            .map_err(|source| SyncError::Api {
                verb: "list",
                name: "nodes".into(),
                source,
            })?;
        let mut present = BTreeSet::new();
        for node in mirrored {
            let node = typed_value(&node, &core("Node"))?;
            let name = str_at(&node, "/metadata/name").unwrap_or_default();
            present.insert(name.clone());
            if used.contains(&name) || wanted.contains(&name) {
                if let Some((host_name, host)) = hosts.get(&name) {
                    let host = match host {
                        Some(h) => Some(h.clone()),
                        None => self.host_node(host_name).await,
                    };
                    self.refresh_tenant_node(&nodes, &node, host_name, host.as_ref())
                        .await?;
                }
                continue;
            }
            // The cache may not show a binding made moments ago: ask the server.
            if self.has_bound_pods(&name).await? {
                continue;
            }
            let params = exactly(str_at(&node, "/metadata/uid"));
            match delete_exact(&nodes, &name, &params).await {
                Ok(_) => {}
                Err(source) => {
                    return Err(SyncError::Api {
                        verb: "delete",
                        name,
                        source,
                    });
                }
            }
        }
        for name in wanted.difference(&present) {
            if let Some((host_name, host)) = hosts.get(name) {
                self.ensure_tenant_node_from(host_name, host.as_ref())
                    .await?;
            }
        }
        Ok(())
    }
}
