//! The namespace-tenant controller: for each `Tenant`, keeps what
//! `tenantplane_core::tenant_plan` plans in every member namespace, reports the
//! tenant's status, and on deletion releases its namespaces.
//!
//! A namespace is a member only through an owner reference whose kind, group and
//! UID match the Tenant; a `tenantplane.io/tenant` label alone counts for nothing.
//! Members are reconciled eight at a time (as Capsule does). Every object is read
//! first and written only when it differs, so a pass over an unchanged tenant makes
//! no writes. An object under one of our names that is not labelled as this
//! tenant's is never touched: it is reported in that namespace's status.
//!
//! A namespace that leaves the Tenant (moved to another Tenant or released) loses
//! what the Tenant put there in the next reconcile, which every namespace event
//! wakes for the Tenant it names now and the one it named before (`revoke`).
//!
//! Deletion orphans the namespaces by default: before the finalizer goes, the
//! Tenant's owner reference (by UID) and its label are removed from every member,
//! and the RoleBindings and policies it put there are deleted, so the owners lose
//! access and the garbage collector has nothing to delete, also when a Tenant of the
//! same name is created later. With `namespaceOptions.onDelete: delete` the members
//! are deleted instead. `preventDeletion` is enforced by the admission webhook.

mod members;
mod release;
mod revoke;
mod status;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{LimitRange, Namespace, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use k8s_openapi::jiff::Timestamp;
use kube::api::ListParams;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::finalizer::{Event as FinalizerEvent, finalizer};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, Resource, ResourceExt};
use tenantplane_api::{IsolationProfile, Tenant};
use tenantplane_core::membership::{MembershipIndex, tenant_names};
use tenantplane_core::metadata::{
    COMPONENT_TENANT, LABEL_COMPONENT, LABEL_MANAGED_BY, LABEL_TENANT, MANAGED_BY_VALUE,
};
use tenantplane_core::tenancy::is_tenant_owner_reference;
use tenantplane_core::tenant_plan::plan_member;
use tokio_util::sync::CancellationToken;

use crate::metrics::{Metrics, ResultLabels, TENANT_CONTROLLER};
use crate::store_ready::StoreReady;

pub use members::MemberOutcome;

/// Holds a Tenant until its namespaces are released.
pub const FINALIZER: &str = "tenantplane.io/namespaces";
/// Member namespaces reconciled at once (as Capsule limits its errgroup).
pub const MEMBER_PARALLELISM: usize = 8;
/// A steady tenant is rechecked this often; watches catch changes sooner.
const RESYNC: Duration = Duration::from_secs(300);

/// Errors of one reconcile; each is retried with backoff.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    #[error("{verb} {what}: {source}")]
    Host {
        verb: &'static str,
        what: String,
        #[source]
        source: Box<kube::Error>,
    },
    #[error("finalizer: {0}")]
    Finalizer(String),
    #[error("the status of Tenant {tenant} kept conflicting after {attempts} attempts")]
    StatusContention { tenant: String, attempts: usize },
    #[error("releasing namespace {namespace}: {message}")]
    Release { namespace: String, message: String },
}

impl TenantError {
    pub(crate) fn host(
        verb: &'static str,
        what: impl Into<String>,
    ) -> impl FnOnce(kube::Error) -> Self {
        let what = what.into();
        move |source| TenantError::Host {
            verb,
            what,
            source: Box::new(source),
        }
    }
}

/// What the controller is run with.
pub struct TenantControllerConfig {
    pub host: Client,
    pub metrics: Arc<Metrics>,
}

struct Context {
    host: Client,
    metrics: Arc<Metrics>,
    /// Every namespace, as the watch that also feeds `index` last saw it.
    namespaces: Store<Namespace>,
    /// Fires once `namespaces` holds its first list (every reconcile waits on it).
    namespaces_ready: StoreReady,
    /// Member namespaces keyed by the owning Tenant's UID.
    index: Arc<RwLock<MembershipIndex>>,
}

/// Runs the Tenant controller until `shutdown` fires.
pub async fn run(config: TenantControllerConfig, shutdown: CancellationToken) {
    let host = config.host.clone();
    // One namespace watch feeds the membership index, then the store, then the
    // controller's triggers, so a reconcile never sees an event the index has not.
    let index = Arc::new(RwLock::new(MembershipIndex::default()));
    let (namespaces, writer) = reflector::store();
    let feed = Arc::clone(&index);
    let namespace_events = watcher(
        Api::<Namespace>::all(host.clone()),
        watcher::Config::default(),
    )
    .default_backoff()
    .map_ok(move |event| {
        index_event(&feed, &event);
        event
    })
    .reflect(writer)
    .touched_objects();
    let ctx = Arc::new(Context {
        host: config.host,
        metrics: config.metrics,
        namespaces_ready: StoreReady::watch(namespaces.clone()),
        namespaces,
        index,
    });
    let controller = Controller::new(Api::<Tenant>::all(host.clone()), watcher::Config::default());
    let by_profile = controller.store();
    let children = watcher::Config::default().labels(&format!(
        "{LABEL_MANAGED_BY}={MANAGED_BY_VALUE},{LABEL_COMPONENT}={COMPONENT_TENANT}"
    ));
    let wake = Arc::clone(&ctx.index);
    let (rb, np, lr, rq) = (
        Arc::clone(&ctx.index),
        Arc::clone(&ctx.index),
        Arc::clone(&ctx.index),
        Arc::clone(&ctx.index),
    );
    controller
        .watches_stream(namespace_events, move |ns| namespace_tenants(&wake, ns))
        .watches(
            Api::<RoleBinding>::all(host.clone()),
            children.clone(),
            move |child| child_tenants(&rb, child),
        )
        .watches(
            Api::<NetworkPolicy>::all(host.clone()),
            children.clone(),
            move |child| child_tenants(&np, child),
        )
        .watches(
            Api::<LimitRange>::all(host.clone()),
            children.clone(),
            move |child| child_tenants(&lr, child),
        )
        .watches(
            Api::<ResourceQuota>::all(host.clone()),
            children,
            move |child| child_tenants(&rq, child),
        )
        .watches(
            Api::<IsolationProfile>::all(host),
            watcher::Config::default(),
            move |profile| {
                let name = profile.name_any();
                by_profile
                    .state()
                    .into_iter()
                    .filter(|t| {
                        t.spec
                            .isolation_profile_ref
                            .as_ref()
                            .is_some_and(|r| r.name == name)
                    })
                    .map(|t| ObjectRef::from_obj(&*t))
                    .collect::<Vec<_>>()
            },
        )
        .graceful_shutdown_on(async move { shutdown.cancelled().await })
        .run(reconcile, error_policy, ctx)
        .for_each(|_| futures::future::ready(()))
        .await;
}

/// The tenants a namespace event concerns: those its owner references name, the one
/// its label names (so a forged label is noticed), and those it named before its
/// last membership change (so a Tenant it left revokes at once). The index was fed
/// this event before the mapper runs. Reconcile checks the UIDs.
fn namespace_tenants(index: &RwLock<MembershipIndex>, ns: Namespace) -> Vec<ObjectRef<Tenant>> {
    let mut names = tenant_names(ns.owner_references(), ns.labels());
    names.extend(
        index
            .read()
            .unwrap_or_else(PoisonError::into_inner)
            .tenants_to_wake(&ns.name_any()),
    );
    names.sort();
    names.dedup();
    names.iter().map(|n| ObjectRef::new(n)).collect()
}

/// The tenant a child object's label names, and those its namespace names now: when
/// a Tenant a namespace left deletes its objects there, the Tenant it joined may
/// create its own under the same names. Reconcile only acts on members.
fn child_tenants<K: Resource>(index: &RwLock<MembershipIndex>, child: K) -> Vec<ObjectRef<Tenant>> {
    let mut names: Vec<String> = child
        .labels()
        .get(LABEL_TENANT)
        .cloned()
        .into_iter()
        .collect();
    if let Some(namespace) = child.meta().namespace.as_deref() {
        names.extend(
            index
                .read()
                .unwrap_or_else(PoisonError::into_inner)
                .names_now(namespace),
        );
    }
    names.sort();
    names.dedup();
    names.iter().map(|n| ObjectRef::new(n)).collect()
}

fn count(ctx: &Context, result: &'static str) {
    ctx.metrics
        .reconciles
        .get_or_create(&ResultLabels {
            controller: TENANT_CONTROLLER,
            result,
        })
        .inc();
}

fn error_policy(tenant: Arc<Tenant>, err: &TenantError, ctx: Arc<Context>) -> Action {
    count(&ctx, "error");
    tracing::warn!(tenant = %tenant.name_any(), error = %err, "Tenant reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

async fn reconcile(tenant: Arc<Tenant>, ctx: Arc<Context>) -> Result<Action, TenantError> {
    let api: Api<Tenant> = Api::all(ctx.host.clone());
    let result = finalizer(&api, FINALIZER, tenant, |event| async {
        match event {
            FinalizerEvent::Apply(tenant) => apply(&tenant, &ctx).await,
            FinalizerEvent::Cleanup(tenant) => release::release(&tenant, &ctx.host).await,
        }
    })
    .await
    .map_err(|e| match e {
        kube::runtime::finalizer::Error::ApplyFailed(err)
        | kube::runtime::finalizer::Error::CleanupFailed(err) => err,
        other => TenantError::Finalizer(other.to_string()),
    });
    if result.is_ok() {
        count(&ctx, "ok");
    }
    result
}

/// Keeps the membership index in step with one namespace watch event. A relist
/// (`Init` … `InitDone`) rebuilds it, so deletions missed while disconnected go.
fn index_event(index: &RwLock<MembershipIndex>, event: &watcher::Event<Namespace>) {
    let mut index = index.write().unwrap_or_else(PoisonError::into_inner);
    let empty = BTreeMap::new();
    let record = |index: &mut MembershipIndex, ns: &Namespace| {
        index.apply(
            &ns.name_any(),
            ns.owner_references(),
            ns.metadata.labels.as_ref().unwrap_or(&empty),
        );
    };
    match event {
        watcher::Event::Init => *index = MembershipIndex::default(),
        watcher::Event::InitApply(ns) | watcher::Event::Apply(ns) => record(&mut index, ns),
        watcher::Event::Delete(ns) => index.delete(&ns.name_any()),
        watcher::Event::InitDone => {}
    }
}

/// The members of `tenant` from the index (verified against the cached namespace:
/// kind, group, name and UID of the owner reference), and the names of the
/// namespaces only labelled for it.
async fn indexed_members(ctx: &Context, tenant: &Tenant) -> (Vec<Namespace>, Vec<String>) {
    // Until the first list is in, an empty index would mean "no members".
    ctx.namespaces_ready.wait().await;
    let (owned, forged) = {
        let index = ctx.index.read().unwrap_or_else(PoisonError::into_inner);
        let uid = tenant.uid().unwrap_or_default();
        (
            index.owned_by(&uid),
            index.only_labelled(&tenant.name_any(), &uid),
        )
    };
    let members = owned
        .iter()
        .filter_map(|name| ctx.namespaces.get(&ObjectRef::new(name)))
        .filter(|ns| {
            ns.owner_references()
                .iter()
                .any(|r| is_tenant_owner_reference(r, tenant))
        })
        .map(|ns| (*ns).clone())
        .collect();
    (members, forged)
}

/// The namespaces `tenant` owns by UID, and the names of those only labelled for
/// it, listed from the API server: the release on deletion must not miss a member
/// because a cache lagged (the garbage collector would delete it).
pub(crate) async fn find_members(
    host: &Client,
    tenant: &Tenant,
) -> Result<(Vec<Namespace>, Vec<String>), TenantError> {
    let name = tenant.name_any();
    let all = Api::<Namespace>::all(host.clone())
        .list(&ListParams::default())
        .await
        .map_err(TenantError::host("list", "namespaces"))?;
    let (members, others): (Vec<Namespace>, Vec<Namespace>) =
        all.items.into_iter().partition(|ns| {
            ns.owner_references()
                .iter()
                .any(|r| is_tenant_owner_reference(r, tenant))
        });
    let forged = others
        .into_iter()
        .filter(|ns| ns.labels().get(LABEL_TENANT) == Some(&name))
        .map(|ns| ns.name_any())
        .collect();
    Ok((members, forged))
}

async fn apply(tenant: &Tenant, ctx: &Context) -> Result<Action, TenantError> {
    let name = tenant.name_any();
    let host = &ctx.host;
    let (members, forged) = indexed_members(ctx, tenant).await;
    for namespace in &forged {
        tracing::warn!(tenant = %name, %namespace,
            "namespace is labelled for this Tenant but has no owner reference to it (kind, group and UID): not a member, not reconciled");
    }
    let profile = match &tenant.spec.isolation_profile_ref {
        None => Ok(None),
        Some(r) => Api::<IsolationProfile>::all(host.clone())
            .get_opt(&r.name)
            .await
            .map_err(TenantError::host("get", format!("IsolationProfile {}", r.name)))?
            .map(|p| Some(p.spec))
            .ok_or_else(|| {
                status::Verdict::blocked(
                    "IsolationProfileNotFound",
                    format!(
                        "IsolationProfile {:?} does not exist: create it or change spec.isolationProfileRef",
                        r.name
                    ),
                )
            }),
    };
    let outcomes = match profile {
        Err(verdict) => Err(verdict),
        Ok(profile) => {
            let plans = members
                .iter()
                .map(|ns| {
                    plan_member(tenant, &ns.name_any(), profile.as_ref())
                        .map(|plan| (ns.clone(), plan))
                })
                .collect::<Result<Vec<_>, _>>();
            match plans {
                Err(err) => Err(status::Verdict::blocked("InvalidSpec", err.to_string())),
                Ok(plans) => Ok(futures::stream::iter(plans)
                    .map(|(ns, plan)| {
                        let (host, name) = (host.clone(), name.clone());
                        async move { members::reconcile_member(&host, &name, &ns, plan).await }
                    })
                    .buffer_unordered(MEMBER_PARALLELISM)
                    .collect::<Vec<MemberOutcome>>()
                    .await),
            }
        }
    };
    let member_names: Vec<String> = members.iter().map(|ns| ns.name_any()).collect();
    // Whatever became of the members' plans, what is outside them goes.
    let member_set: BTreeSet<String> = member_names.iter().cloned().collect();
    let revoked = revoke::revoke(ctx, &name, &tenant.uid().unwrap_or_default(), &member_set).await;
    let written = status::write(host, tenant, &member_names, outcomes, Timestamp::now()).await?;
    revoked?;
    Ok(Action::requeue(
        status::requeue_after(&written, Timestamp::now())
            .unwrap_or(RESYNC)
            .min(RESYNC),
    ))
}
