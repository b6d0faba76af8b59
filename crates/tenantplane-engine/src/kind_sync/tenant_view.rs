//! What makes a host Pod work and look right from the tenant: its service-account
//! tokens (requested from the tenant API server, kept in a host Secret, refreshed
//! before expiry), and the tenant Node it is bound to (a mirror of its host node).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::authentication::v1::{BoundObjectReference, TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::{Node, ServiceAccount};
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;
use tenantplane_api::{DecisionAction, HostTarget, TenantObjectRef};
use tenantplane_core::metadata::{LABEL_MANAGED_BY, MANAGED_BY_VALUE};
use tenantplane_core::pods::HostPod;
use tenantplane_core::pods::host_pod::token_secret_name;
use tenantplane_core::pods::node::{is_mirrored_node, node_status_update, tenant_node};
use tenantplane_core::pods::tokens::{
    is_token_secret_of, needs_tokens, refresh_after, token_secret,
};

use super::pod::{DependencyState, get_value, put_status, str_at};
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
        self.queue.add_after(key.clone(), delay);
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

    /// Binds the tenant Pod to the tenant Node mirroring the host node its host Pod
    /// runs on (creating that Node first). Returns whether it wrote.
    pub(super) async fn bind_to_mirrored_node(
        &self,
        key: &Key,
        tenant_pod: &Value,
        host_pod: &Value,
    ) -> Result<bool, SyncError> {
        let Some(node) = str_at(host_pod, "/spec/nodeName").filter(|n| !n.is_empty()) else {
            return Ok(false);
        };
        if tenant_pod
            .pointer("/spec/nodeName")
            .and_then(Value::as_str)
            .is_some_and(|n| !n.is_empty())
        {
            return Ok(false);
        }
        self.mirror_node(&node).await?;
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

    /// Creates the tenant Node `name` if it is missing, and brings its status in line
    /// with the host node's.
    async fn mirror_node(&self, name: &str) -> Result<(), SyncError> {
        let host_node = self.host_node(name).await;
        let nodes: Api<DynamicObject> = Api::all_with(self.ctx.tenant.clone(), &core("Node"));
        let existing = match get_value(&nodes, &core("Node"), name).await? {
            Some(n) => n,
            None => {
                let body: DynamicObject =
                    serde_json::from_value(tenant_node(name, host_node.as_ref()))
                        .map_err(|e| SyncError::Decode(e.to_string()))?;
                match nodes.create(&post_params(), &body).await {
                    Ok(created) => typed_value(&created, &core("Node"))?,
                    Err(kube::Error::Api(status)) if status.code == 409 => return Ok(()),
                    Err(source) => {
                        return Err(SyncError::Api {
                            verb: "create",
                            name: name.to_owned(),
                            source,
                        });
                    }
                }
            }
        };
        self.refresh_node_status(&nodes, &existing, host_node.as_ref())
            .await
    }

    async fn refresh_node_status(
        &self,
        nodes: &Api<DynamicObject>,
        tenant: &Value,
        host: Option<&Value>,
    ) -> Result<(), SyncError> {
        if !is_mirrored_node(tenant) {
            return Ok(());
        }
        let Some(status) =
            node_status_update(tenant.get("status"), host.and_then(|h| h.get("status")))
        else {
            return Ok(());
        };
        put_status(nodes, tenant, status).await?;
        Ok(())
    }

    /// The host node, when it exists and tenantplane may read it.
    async fn host_node(&self, name: &str) -> Option<Value> {
        let nodes: Api<Node> = Api::all(self.ctx.host.clone());
        match nodes.get_opt(name).await {
            Ok(node) => node.and_then(|n| serde_json::to_value(n).ok()),
            Err(err) => {
                tracing::debug!(%err, node = name, "host node not readable; mirroring its name only");
                None
            }
        }
    }

    /// Mirrored tenant Nodes: refreshed while a tenant Pod is bound to them, removed
    /// when none is.
    pub(super) async fn collect_nodes(&self) -> Result<(), SyncError> {
        let used: BTreeSet<String> = self
            .tenant_store
            .state()
            .iter()
            .filter_map(|p| typed_value(p, &self.tenant_resource).ok())
            .filter_map(|p| str_at(&p, "/spec/nodeName"))
            .collect();
        let nodes: Api<DynamicObject> = Api::all_with(self.ctx.tenant.clone(), &core("Node"));
        let mirrored = nodes
            .list(&ListParams::default().labels(&format!("{LABEL_MANAGED_BY}={MANAGED_BY_VALUE}")))
            .await
            .map_err(|source| SyncError::Api {
                verb: "list",
                name: "nodes".into(),
                source,
            })?;
        for node in mirrored {
            let node = typed_value(&node, &core("Node"))?;
            let name = str_at(&node, "/metadata/name").unwrap_or_default();
            if used.contains(&name) {
                let host = self.host_node(&name).await;
                self.refresh_node_status(&nodes, &node, host.as_ref())
                    .await?;
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
        Ok(())
    }
}
