//! Bidirectional kinds: after the tenant object's host copy exists (created like a
//! toHost copy), each pass compares tenant, host and the last agreed content with
//! the core's three-way planner and writes each side only what the plan says.
//!
//! The base lives in the host copy's `tenantplane.io/sync-base` annotation, so it
//! survives restarts and moves with the object. Existence stays the tenant's: a
//! deleted tenant object deletes its copy (GC), a deleted copy is created again.
//!
//! Conflicts, and the end of a conflict left alone, go to the SyncDecision's
//! conflict history. A pass that finds both sides at the resourceVersions of the
//! last pass with nothing to write is skipped without planning.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use kube::Api;
use kube::api::DynamicObject;
use serde_json::Value;
use tenantplane_api::{ConflictPolicy, DecisionAction};
use tenantplane_core::three_way::{
    self, FieldOwnership, FieldWrite, Side, SyncVersions, ThreeWayPlan, encode_base,
    resource_version as version, split_status, stored_base,
};

use super::{Key, KindSyncer, SyncError, post_params};

/// How a bidirectional kind is synced.
#[derive(Clone, Debug)]
pub struct TwoWaySettings {
    pub ownership: FieldOwnership,
    pub policy: ConflictPolicy,
}

/// Versions this syncer replaced, per side and object: a cache still showing one
/// of them lags behind our own write, and planning from it would undo that write.
#[derive(Debug, Default)]
pub(super) struct SupersededVersions(Mutex<HashMap<(Side, String), String>>);

impl SupersededVersions {
    fn is_stale(&self, side: Side, name: &str, version: Option<&str>) -> bool {
        let map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        version.is_some_and(|v| {
            map.get(&(side, name.to_owned()))
                .is_some_and(|old| old == v)
        })
    }

    fn replaced(&self, side: Side, name: &str, old: Option<&str>) {
        let mut map = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        match old {
            Some(old) => map.insert((side, name.to_owned()), old.to_owned()),
            None => map.remove(&(side, name.to_owned())),
        };
    }
}

impl KindSyncer {
    /// One two-way pass over a tenant object and its host copy.
    pub(super) async fn sync_two_way(
        &self,
        key: &Key,
        settings: &TwoWaySettings,
        tenant: &Value,
        host_name: &str,
        host: &Value,
    ) -> Result<(), SyncError> {
        let uid = tenant
            .pointer("/metadata/uid")
            .and_then(Value::as_str)
            .map(str::to_owned);
        if self
            .superseded
            .is_stale(Side::Tenant, &key.1, version(tenant))
            || self
                .superseded
                .is_stale(Side::Host, host_name, version(host))
        {
            // Our last write has not reached the cache yet: its event brings the key back.
            self.requeue_after(key, Duration::from_millis(200));
            return Ok(());
        }
        let quiet = self.passes.quiet(key, tenant, host);
        self.count_two_way_pass(if quiet { "unchanged" } else { "planned" });
        if quiet {
            self.observe_latency(key);
            return Ok(());
        }
        let base = match stored_base(host) {
            Ok(base) => base,
            Err(err) => {
                // A damaged base is treated as none: the owner's values start over.
                tracing::warn!(%err, kind = %self.group_kind, namespace = %key.0, name = %key.1, "ignoring the host copy's sync base");
                None
            }
        };
        let plan = three_way::plan(
            base.as_ref(),
            tenant,
            host,
            &settings.ownership,
            settings.policy,
        );
        let base_text = match encode_base(&plan.base) {
            Ok(text) => text,
            Err(err) => {
                self.skip_once(
                    key,
                    uid,
                    host_name,
                    "base",
                    format!("cannot be synced both ways: {err}"),
                );
                return Ok(());
            }
        };
        let kind = self.group_kind.to_string();
        let settled = self.report_conflict(key, uid.clone(), host_name, &plan, settings.policy);
        let unresolved: Vec<String> = plan.unresolved().map(|c| c.path.clone()).collect();
        if unresolved.is_empty() {
            self.ctx.conflicts.clear(&(kind.clone(), key.clone()));
        } else {
            self.ctx.conflicts.set(
                (kind.clone(), key.clone()),
                format!(
                    "{kind} {}/{}: both sides changed {} since they last agreed (conflictPolicy manual)",
                    key.0,
                    key.1,
                    unresolved.join(", ")
                ),
            );
            let lines = three_way::summary(&plan);
            self.skip_once(
                key,
                uid.clone(),
                host_name,
                &base_text,
                format!(
                    "Conflict: the tenant and the host both changed {} since they last agreed; \
                     conflictPolicy manual leaves both alone until one side gives way ({})",
                    unresolved.join(", "),
                    lines.join("; ")
                ),
            );
        }
        if !plan.tenant_writes.is_empty() {
            self.write_side(Side::Tenant, key, tenant, &plan.tenant_writes, None)
                .await?;
            self.decide(
                DecisionAction::Update,
                key,
                uid.clone(),
                host_name,
                describe(&plan, Side::Tenant, settings.policy),
            );
        }
        let host_write = !plan.host_writes.is_empty()
            || three_way::stored_base_text(host) != Some(base_text.as_str());
        if host_write {
            self.write_side(Side::Host, key, host, &plan.host_writes, Some(&base_text))
                .await?;
            if !plan.host_writes.is_empty() {
                self.decide(
                    DecisionAction::Update,
                    key,
                    uid,
                    host_name,
                    describe(&plan, Side::Host, settings.policy),
                );
            }
        }
        if let Some((object, record)) = settled {
            self.report_settled(key, object, record);
        }
        let quiet = !host_write && plan.tenant_writes.is_empty();
        self.passes
            .set_quiet(key, quiet.then(|| SyncVersions::of(tenant, host)).flatten());
        self.observe_latency(key);
        Ok(())
    }

    /// Writes one side: the main resource, then the status subresource, each only
    /// when something in it changes. `base` is stored on the host copy.
    async fn write_side(
        &self,
        side: Side,
        key: &Key,
        current: &Value,
        writes: &[FieldWrite],
        base: Option<&str>,
    ) -> Result<(), SyncError> {
        let (main, status) = split_status(writes);
        let name = current
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_owned();
        let api: Api<DynamicObject> = match side {
            Side::Host => self.host_api.clone(),
            Side::Tenant => {
                Api::namespaced_with(self.ctx.tenant.clone(), &key.0, &self.tenant_resource)
            }
        };
        let mut object = three_way::apply(current, &main);
        if let Some(base) = base {
            three_way::set_base(&mut object, base);
        }
        let mut latest = current.clone();
        if object != *current {
            if side == Side::Host {
                let _ = self.write_budget().await;
                self.count_write("update");
            }
            let body: DynamicObject =
                serde_json::from_value(object).map_err(|e| SyncError::Decode(e.to_string()))?;
            let stored = api
                .replace(&name, &post_params(), &body)
                .await
                .map_err(|source| SyncError::Api {
                    verb: "update",
                    name: name.clone(),
                    source,
                })?;
            self.superseded.replaced(side, &name, version(current));
            latest = serde_json::to_value(&stored).map_err(|e| SyncError::Decode(e.to_string()))?;
        }
        if !status.is_empty() {
            if side == Side::Host {
                let _ = self.write_budget().await;
                self.count_write("update");
            }
            let body: DynamicObject = serde_json::from_value(three_way::apply(&latest, &status))
                .map_err(|e| SyncError::Decode(e.to_string()))?;
            match api.replace_status(&name, &post_params(), &body).await {
                Ok(_) => self.superseded.replaced(side, &name, version(&latest)),
                // No status subresource: status is part of the main resource, so the
                // same object goes there.
                Err(kube::Error::Api(s)) if s.code == 404 => {
                    api.replace(&name, &post_params(), &body)
                        .await
                        .map_err(|source| SyncError::Api {
                            verb: "update",
                            name: name.clone(),
                            source,
                        })?;
                    self.superseded.replaced(side, &name, version(&latest));
                }
                Err(source) => {
                    return Err(SyncError::Api {
                        verb: "update the status of",
                        name,
                        source,
                    });
                }
            }
        }
        Ok(())
    }
}

/// The decision's reason for the writes on `side`, naming what was overwritten.
fn describe(plan: &ThreeWayPlan, side: Side, policy: ConflictPolicy) -> String {
    let lines: Vec<String> = three_way::summary(plan)
        .into_iter()
        .filter(|l| {
            l.starts_with(&format!("{}:", side.as_str()))
                || (l.starts_with("conflict:") && policy != ConflictPolicy::Manual)
        })
        .collect();
    format!(
        "synced both ways (conflictPolicy {}): {}",
        match policy {
            ConflictPolicy::Manual => "manual",
            ConflictPolicy::TenantWins => "tenant-wins",
            ConflictPolicy::HostWins => "host-wins",
        },
        lines.join("; ")
    )
}
