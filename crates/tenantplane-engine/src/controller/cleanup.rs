//! A deleted TenantCluster's cleanup (its finalizer): every host object it synced,
//! its Pods' token Secrets and volume copies, then its SyncDecision.

use super::*;

/// Removes every host object this TenantCluster synced, then its SyncDecision.
pub(super) async fn cleanup(tc: &TenantCluster, ctx: &Context) -> Result<Action, ReconcileError> {
    let namespace = tc.namespace().ok_or(ReconcileError::NoNamespace)?;
    let name = tc.name_any();
    let mut running = None;
    let key = (namespace.clone(), name.clone());
    for (_, slot) in ctx.take_slots(|k| *k == key) {
        running = running.or(slot.lock().await.take());
    }
    if let Some(running) = running {
        ctx.engine_stopped(&namespace, &name);
        let tenant = running.engine.tenant.clone();
        stop(running).await;
        // Tenant Pods carry a finalizer only a running engine removes. A tenant API
        // server that does not answer is not waited for: its Pods keep the
        // finalizer (see the README) and the TenantCluster still goes.
        match tokio::time::timeout(TENANT_TIMEOUT, release_pod_finalizers(&tenant)).await {
            Ok(Ok(released)) => tracing::info!(tenant = %name, released, "tenant Pods released"),
            Ok(Err(err)) => {
                tracing::warn!(tenant = %name, %err, "could not release the tenant's Pods")
            }
            Err(_) => {
                tracing::warn!(tenant = %name, "the tenant API server did not answer; its Pods keep tenantplane's finalizer")
            }
        }
    }
    ctx.isolation_memo.forget(&key);
    if let Some(uid) = tc.uid() {
        ctx.external_cleaned
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .retain(|(cleaned, _)| *cleaned != uid);
    }
    let host = &ctx.config.host;
    let mut kinds: BTreeSet<(String, String)> = tc
        .status
        .as_ref()
        .map(|s| {
            s.synced_resources
                .iter()
                .map(|r| (r.api_version.clone(), r.kind.clone()))
                .collect()
        })
        .unwrap_or_default();
    if let Some(policy) = Api::<SyncPolicy>::all(host.clone())
        .get_opt(&tc.spec.sync_policy_ref.name)
        .await?
    {
        kinds.extend(
            policy
                .spec
                .resources
                .iter()
                .map(|r| (r.api_version.clone(), r.kind.clone())),
        );
    }
    if kinds.contains(&("v1".to_owned(), "Pod".to_owned())) {
        // What synced Pods brought along: their dependency copies (they reverse-map
        // to this tenant like any copy), token Secrets and volumes (below).
        for kind in ["ConfigMap", "Secret", "PersistentVolumeClaim"] {
            kinds.insert(("v1".to_owned(), kind.to_owned()));
        }
    }
    let mut deleted = cleanup_pod_extras(host, &namespace, &name).await?;
    for (api_version, kind) in kinds {
        let Ok(group_kind) = GroupKind::from_api_version(&api_version, &kind) else {
            continue;
        };
        let version = api_version.rsplit('/').next().unwrap_or(&api_version);
        let gvk = GroupVersionKind::gvk(&group_kind.group, version, &kind);
        // A kind the host no longer serves has no objects left to delete, and a
        // cluster-scoped one has no copies in the namespace (fromHost kinds such as
        // StorageClass are copied into the tenant, never onto the host; PVs of Pods
        // are removed with the Pods' extras above).
        let Ok((resource, capabilities)) = pinned_kind(host, &gvk).await else {
            continue;
        };
        if capabilities.scope == kube::discovery::Scope::Cluster {
            continue;
        }
        let api: Api<DynamicObject> = Api::namespaced_with(host.clone(), &namespace, &resource);
        // Labels can be copied by hand: delete only what reverse-maps to this tenant.
        deleted += delete_matching(&api, &host_selector(&name, &group_kind), |obj| {
            let labels = obj.metadata.labels.clone().unwrap_or_default();
            let annotations = obj.metadata.annotations.clone().unwrap_or_default();
            source_in(&obj.name_any(), &labels, &annotations, &name, &group_kind).is_some()
        })
        .await?;
    }
    // A provisioned control plane lives in its own namespace, out of reach of
    // owner references: remove it explicitly.
    cleanup_control_plane(host, tc).await?;
    let decisions: Api<SyncDecision> = Api::namespaced(host.clone(), &namespace);
    match decisions.delete(&name, &DeleteParams::default()).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 => {}
        Err(e) => return Err(e.into()),
    }
    tracing::info!(tenant = %name, namespace = %namespace, deleted, "TenantCluster deleted; its host objects were removed");
    Ok(Action::await_change())
}

/// Removes the token Secrets and PersistentVolume copies of a TenantCluster's Pods:
/// only those whose labels and annotations name this very tenant.
pub(super) async fn cleanup_pod_extras(
    host: &Client,
    namespace: &str,
    name: &str,
) -> Result<usize, ReconcileError> {
    let mut deleted = 0;
    let secrets: Api<DynamicObject> = Api::namespaced_with(
        host.clone(),
        namespace,
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "Secret")),
    );
    let token_selector = host_selector(name, &GroupKind::new("", TOKEN_KIND));
    let volumes: Api<DynamicObject> = Api::all_with(
        host.clone(),
        &ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", "PersistentVolume")),
    );
    let volume_selector = host_selector(name, &GroupKind::new("", "PersistentVolume"));
    deleted += delete_matching(&secrets, &token_selector, |o| {
        o.name_any().starts_with(TOKEN_SECRET_PREFIX)
    })
    .await?;
    deleted += delete_matching(&volumes, &volume_selector, |o| {
        let Ok(value) = serde_json::to_value(o) else {
            return false;
        };
        let virtual_name = o
            .annotations()
            .get(ANNOTATION_VIRTUAL_NAME)
            .cloned()
            .unwrap_or_default();
        TenantTarget::new(name, namespace).is_ok_and(|t| pv_is_ours(&t, &virtual_name, &value))
    })
    .await?;
    Ok(deleted)
}

/// Deletes, with a UID precondition, each object of `api` matching `selector` that
/// `is_ours` accepts.
pub(super) async fn delete_matching(
    api: &Api<DynamicObject>,
    selector: &str,
    is_ours: impl Fn(&DynamicObject) -> bool,
) -> Result<usize, ReconcileError> {
    let mut deleted = 0;
    for obj in api.list(&ListParams::default().labels(selector)).await? {
        if !is_ours(&obj) {
            continue;
        }
        if delete_exact(api, &obj.name_any(), &exactly(obj.uid())).await? {
            deleted += 1;
        }
    }
    Ok(deleted)
}
