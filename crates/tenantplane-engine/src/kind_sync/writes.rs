//! One key's sync: read the pair from the caches, plan, and carry out the host
//! write (create, update, delete), remembering what the server made of it.

use super::*;

impl KindSyncer {
    /// The tenant object of `key`, its host name, and its host copy, from the caches.
    pub(super) fn cached_pair(
        &self,
        key: &Key,
    ) -> Result<(Option<Value>, String, Option<Value>), SyncError> {
        let tenant_ref = ObjectRef::new_with(&key.1, self.tenant_resource.clone()).within(&key.0);
        // A fromHost copy is the host's object shown in the tenant: never synced back.
        let tenant_obj = self
            .tenant_store
            .get(&tenant_ref)
            .filter(|o| !is_from_host_copy(o))
            .map(|o| typed_value(&o, &self.tenant_resource))
            .transpose()?;
        let host_name = host_name(&SourceName {
            name: &key.1,
            virtual_namespace: &key.0,
            tenant: &self.ctx.target.tenant,
        })
        .name;
        let host_ref = ObjectRef::new_with(&host_name, self.host_resource.clone())
            .within(&self.ctx.target.host_namespace);
        let host_obj = match self.host_store.get(&host_ref) {
            Some(o) => Some(typed_value(&o, &self.host_resource)?),
            None => self
                .unseen_creates
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .get(&host_name)
                .cloned(),
        };
        Ok((tenant_obj, host_name, host_obj))
    }

    pub(super) async fn sync(&self, key: &Key) -> Result<(), SyncError> {
        if let Some(settings) = &self.two_way {
            let (tenant_obj, host_name, host_obj) = self.cached_pair(key)?;
            return match (tenant_obj, host_obj) {
                (Some(tenant), Some(host)) => {
                    self.sync_two_way(key, settings, &tenant, &host_name, &host)
                        .await
                }
                (Some(tenant), None) => self.apply(key, &tenant, None).await,
                (None, Some(host)) => {
                    self.passes.forget(key);
                    self.ctx
                        .conflicts
                        .clear(&(self.group_kind.to_string(), key.clone()));
                    self.collect(key, &host_name, &host).await
                }
                (None, None) => {
                    self.passes.forget(key);
                    Ok(())
                }
            };
        }
        if let Some(path) = &self.pods {
            return self.sync_pod(path, key).await;
        }
        if let Some(path) = &self.services {
            return self.sync_service(path, key).await;
        }
        if tenantplane_core::services::ingress::is_ingress(&self.group_kind) {
            return self.sync_ingress(key).await;
        }
        let (tenant_obj, host_name, host_obj) = self.cached_pair(key)?;
        match tenant_obj {
            Some(tenant_value) => self.apply(key, &tenant_value, host_obj).await,
            None => match host_obj {
                Some(host_obj) => self.collect(key, &host_name, &host_obj).await,
                None => Ok(()),
            },
        }
    }

    pub(super) async fn apply(
        &self,
        key: &Key,
        tenant_value: &Value,
        host_obj: Option<Value>,
    ) -> Result<(), SyncError> {
        let uid = tenant_value
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        let namespaces = self
            .namespaces
            .as_ref()
            .map(namespaces::tenant_namespaces)
            .unwrap_or_default();
        let (placement, mut desired) = match to_host_in(
            &self.ctx.target,
            &self.group_kind,
            Scope::Namespaced,
            tenant_value,
            &namespaces,
        ) {
            Ok(ok) => ok,
            Err(
                TransformError::SystemNamespace { .. }
                | TransformError::TenantInfrastructure { .. },
            ) => return Ok(()),
            Err(err) => {
                let name = host_name(&SourceName {
                    name: &key.1,
                    virtual_namespace: &key.0,
                    tenant: &self.ctx.target.tenant,
                })
                .name;
                self.skip_once(key, uid, &name, "", format!("cannot be synced: {err}"));
                return Ok(());
            }
        };
        let hash = stamp_desired_hash(&mut desired);
        let host_name = placement.host_name.name.clone();
        // Before any write is planned, so a refused Service's host copy stays as it was.
        if self
            .refuses_service(key, uid.clone(), &host_name, tenant_value)
            .await
        {
            return Ok(());
        }
        let source = placement.source_identity(&self.ctx.target.tenant, uid.as_deref());

        // A write refused for this very desired state: do not retry until it changes.
        let refused = self
            .refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(&host_name)
            .cloned();
        let mut observed = host_obj;
        if let Some(refusal) = &refused
            && refusal.hash == hash
        {
            if refusal.refused_by_host {
                // Sending it again would be refused again, on every drift pass.
                return Ok(());
            }
            if observed.is_none() {
                // Refused because a foreign object holds the name: look (a read), and
                // create only once it is gone.
                match self.host_api.get_opt(&host_name).await {
                    Ok(Some(live)) => {
                        observed = Some(
                            serde_json::to_value(&live)
                                .map_err(|e| SyncError::Decode(e.to_string()))?,
                        )
                    }
                    Ok(None) => {}
                    Err(source) => {
                        return Err(SyncError::Api {
                            verb: "get",
                            name: host_name,
                            source,
                        });
                    }
                }
            } else {
                return Ok(());
            }
        }
        let memo = self.memo_of(&host_name);
        let plan = plan_apply(&source, &desired, observed.as_ref(), memo.as_ref());
        self.carry_out(
            key,
            &source,
            &placement_reason(&self.ctx.target, &placement),
            &hash,
            plan,
            true,
        )
        .await
    }

    pub(super) async fn carry_out(
        &self,
        key: &Key,
        source: &SourceIdentity,
        create_reason: &str,
        hash: &str,
        plan: ApplyPlan,
        may_retry_conflict: bool,
    ) -> Result<(), SyncError> {
        let host_name = tenantplane_core::naming::host_name(&source.source_name()).name;
        let uid = source.uid.clone();
        match plan {
            ApplyPlan::Noop => {
                self.refused
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(&host_name);
                self.observe_latency(key);
                Ok(())
            }
            ApplyPlan::Skip { reason } => {
                // Nothing reaches the host, so there is no latency to observe.
                self.seen_at
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(key);
                self.skip_once(key, uid, &host_name, hash, reason);
                Ok(())
            }
            ApplyPlan::Create { object } => {
                let waited = self.write_budget().await;
                let body: DynamicObject = serde_json::from_value(object.clone())
                    .map_err(|e| SyncError::Decode(e.to_string()))?;
                self.count_write("create");
                match self.host_api.create(&post_params(), &body).await {
                    Ok(created) => {
                        self.remember(&host_name, &object, &created);
                        if let Ok(value) = typed_value(&created, &self.host_resource) {
                            self.unseen_creates
                                .lock()
                                .unwrap_or_else(PoisonError::into_inner)
                                .insert(host_name.clone(), value);
                        }
                        self.observe_latency(key);
                        self.decide(
                            DecisionAction::Create,
                            key,
                            uid,
                            &host_name,
                            format!("{create_reason}{waited}"),
                        );
                        Ok(())
                    }
                    Err(kube::Error::Api(status))
                        if may_retry_conflict
                            && WriteOutcome::of_status(status.code) == WriteOutcome::Conflict =>
                    {
                        // Someone holds the name. Look at it and plan again: ours (our
                        // cache lagged) is updated, anything else is a Skip.
                        let live = self.host_api.get_opt(&host_name).await.map_err(|source| {
                            SyncError::Api {
                                verb: "get",
                                name: host_name.clone(),
                                source,
                            }
                        })?;
                        let live = live
                            .map(|l| serde_json::to_value(&l))
                            .transpose()
                            .map_err(|e| SyncError::Decode(e.to_string()))?;
                        let plan = plan_apply(source, &object, live.as_ref(), None);
                        Box::pin(self.carry_out(key, source, create_reason, hash, plan, false))
                            .await
                    }
                    Err(kube::Error::Api(status))
                        if WriteOutcome::of_status(status.code).is_refused() =>
                    {
                        self.skip_until_changed(
                            key,
                            uid,
                            &host_name,
                            hash,
                            format!("the host API server refused it: {}", status.message),
                        );
                        Ok(())
                    }
                    Err(source) => Err(SyncError::Api {
                        verb: "create",
                        name: host_name,
                        source,
                    }),
                }
            }
            ApplyPlan::Update {
                object,
                reason,
                immutable,
            } => {
                let waited = self.write_budget().await;
                let body: DynamicObject = serde_json::from_value(object.clone())
                    .map_err(|e| SyncError::Decode(e.to_string()))?;
                self.count_write("update");
                match self
                    .host_api
                    .replace(&host_name, &post_params(), &body)
                    .await
                {
                    Ok(updated) => {
                        self.remember(&host_name, &object, &updated);
                        self.observe_latency(key);
                        let kept = if immutable.is_empty() {
                            String::new()
                        } else {
                            format!(
                                "; kept the live values of fields that cannot change after creation: {}",
                                immutable.join(", ")
                            )
                        };
                        self.decide(
                            DecisionAction::Update,
                            key,
                            uid,
                            &host_name,
                            format!("{reason}{kept}{waited}"),
                        );
                        Ok(())
                    }
                    // A Conflict (changed since our cache saw it) is an error: the watch
                    // brings the new version. A Forbidden update is retried as an error
                    // too; only an Invalid one is recorded, with the fields refused.
                    Err(kube::Error::Api(status))
                        if WriteOutcome::of_status(status.code)
                            == WriteOutcome::Refused(RefusedAs::Invalid) =>
                    {
                        let fields: Vec<String> = status
                            .details
                            .as_ref()
                            .map(|d| {
                                d.causes
                                    .iter()
                                    .map(|c| c.field.clone())
                                    .filter(|f| !f.is_empty())
                                    .collect()
                            })
                            .unwrap_or_default();
                        let reason = if fields.is_empty() {
                            format!("the host API server refused the update: {}", status.message)
                        } else {
                            format!(
                                "the host API server refused to change {} (immutable or invalid); \
                                 recreate the tenant object to change it",
                                fields.join(", ")
                            )
                        };
                        self.skip_once(key, uid, &host_name, hash, reason);
                        Ok(())
                    }
                    Err(source) => Err(SyncError::Api {
                        verb: "update",
                        name: host_name,
                        source,
                    }),
                }
            }
        }
    }

    /// What the server stored at our last write of `host_name`, if we wrote it.
    pub(super) fn memo_of(&self, host_name: &str) -> Option<WriteMemo> {
        self.memos
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get(host_name)
            .cloned()
    }

    pub(super) fn remember(&self, host_name: &str, desired: &Value, stored: &DynamicObject) {
        let stored = serde_json::to_value(stored).unwrap_or(Value::Null);
        let memo = WriteMemo::after_write(desired, &stored);
        self.memos
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .insert(host_name.to_owned(), memo);
        self.refused
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(host_name);
    }

    /// Garbage collection of a managed host object whose tenant source is gone.
    pub(super) async fn collect(
        &self,
        key: &Key,
        host_name: &str,
        host_obj: &Value,
    ) -> Result<(), SyncError> {
        let source = SourceIdentity {
            tenant: self.ctx.target.tenant.clone(),
            virtual_namespace: key.0.clone(),
            name: key.1.clone(),
            group_kind: self.group_kind.clone(),
            uid: None,
        };
        let tenant_uid = host_obj
            .pointer("/metadata/annotations/tenantplane.io~1virtual-uid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        match plan_gc(&source, host_obj) {
            GcPlan::Keep { reason } => {
                self.skip_once(key, tenant_uid, host_name, "gc", reason);
                Ok(())
            }
            GcPlan::Delete { uid, reason } => {
                let already_sent = uid.as_ref().is_some_and(|uid| {
                    self.sent_deletes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .get(host_name)
                        .is_some_and(|sent| sent == uid)
                });
                if already_sent {
                    // Deleted already; its watch event brings the key back if it stays.
                    return Ok(());
                }
                let waited = self.write_budget().await;
                let params = exactly(uid.clone());
                self.count_write("delete");
                let answer = self.host_api.delete(host_name, &params).await;
                let done = match &answer {
                    Ok(_) => true,
                    Err(kube::Error::Api(status)) => status.code == 404,
                    Err(_) => false,
                };
                if let (true, Some(uid)) = (done, uid) {
                    self.sent_deletes
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .insert(host_name.to_owned(), uid);
                }
                match answer {
                    Ok(_) => {}
                    // Already gone: nothing left to collect, and no decision to record.
                    Err(kube::Error::Api(status)) if status.code == 404 => return Ok(()),
                    Err(source) => {
                        return Err(SyncError::Api {
                            verb: "delete",
                            name: host_name.to_owned(),
                            source,
                        });
                    }
                }
                self.memos
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(host_name);
                self.refused
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .remove(host_name);
                self.observe_latency(key);
                self.decide(
                    DecisionAction::Delete,
                    key,
                    tenant_uid,
                    host_name,
                    format!("{reason}{waited}"),
                );
                Ok(())
            }
        }
    }
}
