//! Sharded replicas: the TenantClusters are divided into a fixed number of shards,
//! each a `coordination.k8s.io/v1` Lease that exactly one replica holds at a time,
//! and each replica syncs only the TenantClusters of the shards it holds.
//!
//! Every replica also renews a Lease of its own (`<group>-replica-<hash>`): the live
//! replicas are those whose Lease this replica has seen change within a lease
//! duration of its own clock (never comparing the writers' clocks, see
//! [`LeaseObserver`]). Which replica should hold a shard is
//! [`tenantplane_core::sharding::plan_shards`]'s answer. A replica gives a shard
//! up only after closing its gate (no reconcile of it in flight) and stopping its
//! engines, and takes one only once its Lease is released or expired: two replicas
//! never write the same TenantCluster. A holder that cannot renew within the renew
//! deadline (two thirds of the lease duration) stops its work there, as the leader
//! election does.
//!
//! Stays over 500 lines: one lease protocol (gates, membership, handover);
//! splitting it would scatter the rule that two replicas never write the same
//! TenantCluster.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{DeleteParams, ListParams, ObjectMeta, PostParams};
use kube::{Api, Client, ResourceExt};
use tenantplane_core::sharding::{ShardAction, ShardLease, plan_shards, replica_key, shard_of};
use tokio::sync::{RwLock, RwLockReadGuard};
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::leader::{self, LeaseObserver};
use crate::metrics::Metrics;

/// Every Lease of one shard group carries this label (its value: the group).
pub const LABEL_SHARD_GROUP: &str = "tenantplane.io/shard-group";
/// A shard Lease's shard number.
pub const LABEL_SHARD: &str = "tenantplane.io/shard";
/// Marks a replica's own Lease; its value is the replica's shard count.
const LABEL_REPLICA: &str = "tenantplane.io/shard-replica";

/// One replica's place in a shard group.
#[derive(Clone, Debug)]
pub struct ShardConfig {
    /// Where the Leases live.
    pub namespace: String,
    /// The Leases' name prefix and group label.
    pub group: String,
    /// This replica's identity (the pod name): unique among the replicas.
    pub holder: String,
    /// How many shards the TenantClusters are divided into (the same on every
    /// replica; more shards than replicas spreads them more evenly).
    pub shards: u32,
    pub lease_duration: Duration,
}

impl ShardConfig {
    pub fn new(namespace: &str, group: &str, holder: &str, shards: u32) -> Self {
        Self {
            namespace: namespace.to_owned(),
            group: group.to_owned(),
            holder: holder.to_owned(),
            shards: shards.max(1),
            lease_duration: Duration::from_secs(15),
        }
    }

    fn renew_every(&self) -> Duration {
        leader::renew_every(self.lease_duration)
    }

    fn renew_deadline(&self) -> Duration {
        leader::renew_deadline(self.lease_duration)
    }

    pub fn shard_lease_name(&self, shard: u32) -> String {
        format!("{}-{shard}", self.group)
    }

    fn replica_lease_name(&self) -> String {
        format!("{}-replica-{}", self.group, replica_key(&self.holder))
    }

    fn lease_seconds(&self) -> i32 {
        i32::try_from(self.lease_duration.as_secs()).unwrap_or(i32::MAX)
    }
}

/// Which shards this replica works on. A reconcile holds its shard's gate shared
/// for its whole run; closing a shard takes the gate exclusively, so once it is
/// closed no reconcile of that shard is still writing.
pub struct ShardGates {
    count: u32,
    gates: Vec<RwLock<bool>>,
}

impl ShardGates {
    pub fn new(count: u32) -> Self {
        let count = count.max(1);
        Self {
            count,
            gates: (0..count).map(|_| RwLock::new(false)).collect(),
        }
    }

    pub fn shard_of(&self, namespace: &str, name: &str) -> u32 {
        shard_of(namespace, name, self.count)
    }

    fn gate(&self, shard: u32) -> Option<&RwLock<bool>> {
        self.gates.get(usize::try_from(shard).ok()?)
    }

    /// `Some` while this replica holds the shard of `namespace/name`; keep it for
    /// the whole reconcile.
    pub async fn enter(&self, namespace: &str, name: &str) -> Option<RwLockReadGuard<'_, bool>> {
        let gate = self.gate(self.shard_of(namespace, name))?.read().await;
        (*gate).then_some(gate)
    }

    /// The shards open now (for status and tests; a snapshot).
    pub fn open_shards(&self) -> BTreeSet<u32> {
        (0..self.count)
            .filter(|s| {
                self.gate(*s)
                    .and_then(|g| g.try_read().ok().map(|open| *open))
                    .unwrap_or(false)
            })
            .collect()
    }

    async fn set(&self, shard: u32, open: bool) {
        if let Some(gate) = self.gate(shard) {
            *gate.write().await = open;
        }
    }
}

/// Runs the shard group membership of this replica until `shutdown`, then stops
/// the work of every shard it holds and releases their Leases. `started(shard)`
/// is called once a shard is taken (its gate already open); `stop(shard)` must
/// return only once nothing of that shard writes (its gate is already closed).
pub async fn run<S, F, Fut>(
    client: Client,
    config: ShardConfig,
    gates: Arc<ShardGates>,
    metrics: Arc<Metrics>,
    shutdown: CancellationToken,
    started: S,
    stop: F,
) where
    S: Fn(u32),
    F: Fn(u32) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    let mut member = Member {
        api: Api::namespaced(client, &config.namespace),
        config,
        gates,
        stop: Arc::new(stop),
        held: BTreeMap::new(),
        stopping: BTreeMap::new(),
        observers: HashMap::new(),
    };
    tracing::info!(group = %member.config.group, holder = %member.config.holder,
        shards = member.config.shards, "joining the shard group");
    while !shutdown.is_cancelled() {
        member.round(&started).await;
        metrics
            .shards_held
            .set(i64::try_from(member.held.len()).unwrap_or(i64::MAX));
        tokio::select! {
            _ = shutdown.cancelled() => {}
            _ = tokio::time::sleep(member.config.renew_every()) => {}
        }
    }
    member.leave().await;
    metrics.shards_held.set(0);
}

struct Member<F> {
    api: Api<Lease>,
    config: ShardConfig,
    gates: Arc<ShardGates>,
    stop: Arc<F>,
    /// The shards this replica holds, and when it last renewed each.
    held: BTreeMap<u32, Instant>,
    /// Shards whose work is being stopped (to release them, or because their Lease
    /// was lost).
    stopping: BTreeMap<u32, JoinHandle<()>>,
    observers: HashMap<String, LeaseObserver>,
}

/// The Leases of the group as read in one round.
struct Seen {
    live: BTreeSet<String>,
    /// Shard counts of live replicas that differ from this one's.
    other_counts: BTreeSet<String>,
    shards: BTreeMap<u32, Lease>,
    views: BTreeMap<u32, ShardLease>,
}

impl<F, Fut> Member<F>
where
    F: Fn(u32) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    async fn round(&mut self, started: &impl Fn(u32)) {
        if let Err(error) = self.renew_replica_lease().await {
            tracing::warn!(%error, "could not renew this replica's Lease; retrying");
        }
        let seen = match self.read().await {
            Ok(seen) => seen,
            Err(error) => {
                tracing::warn!(%error, "could not list the shard Leases; retrying");
                self.stop_overdue();
                return;
            }
        };
        // Held here but not there (taken over, or deleted): no longer ours.
        let lost: Vec<u32> = self
            .held
            .keys()
            .copied()
            .filter(|s| {
                seen.views.get(s).and_then(|l| l.holder.as_deref())
                    != Some(self.config.holder.as_str())
            })
            .collect();
        for shard in lost {
            tracing::warn!(
                shard,
                "the shard's Lease names another holder: stopping its work"
            );
            self.held.remove(&shard);
            self.begin_stop(shard);
        }
        let actions = if seen.other_counts.is_empty() {
            plan_shards(
                &self.config.holder,
                self.config.shards,
                &seen.live,
                &seen.views,
            )
        } else {
            // Replicas that divide differently would put one TenantCluster in two
            // shards held by two replicas: hold nothing until they agree.
            tracing::error!(shards = self.config.shards, others = ?seen.other_counts,
                "live replicas run with a different --shards: holding no shard until they agree");
            self.held
                .keys()
                .copied()
                .map(ShardAction::Release)
                .collect()
        };
        for action in actions {
            match action {
                ShardAction::Renew(shard) => self.renew(shard, &seen, started).await,
                ShardAction::Release(shard) => self.release(shard, &seen).await,
                ShardAction::Acquire(shard) => self.acquire(shard, &seen, started).await,
            }
        }
        self.stop_overdue();
    }

    /// Lists the group's Leases and says, by this replica's clock, which are live.
    async fn read(&mut self) -> Result<Seen, kube::Error> {
        let leases = self
            .api
            .list(
                &ListParams::default()
                    .labels(&format!("{LABEL_SHARD_GROUP}={}", self.config.group)),
            )
            .await?;
        let now = Instant::now();
        let mut seen = Seen {
            live: BTreeSet::new(),
            other_counts: BTreeSet::new(),
            shards: BTreeMap::new(),
            views: BTreeMap::new(),
        };
        let mut names = BTreeSet::new();
        for lease in leases.items {
            let name = lease.name_any();
            names.insert(name.clone());
            let spec = lease.spec.clone().unwrap_or_default();
            let duration = Duration::from_secs(
                u64::try_from(spec.lease_duration_seconds.unwrap_or(0)).unwrap_or(0),
            );
            let version = lease.resource_version().unwrap_or_default();
            let expired = self
                .observers
                .entry(name)
                .or_default()
                .expired(&version, now, duration);
            let holder = spec.holder_identity.filter(|h| !h.is_empty());
            let labels = lease.labels();
            if let Some(count) = labels.get(LABEL_REPLICA) {
                if let (Some(holder), false) = (holder, expired) {
                    if *count != self.config.shards.to_string() {
                        seen.other_counts.insert(format!("{holder}: {count}"));
                    }
                    seen.live.insert(holder);
                }
            } else if let Some(shard) = labels
                .get(LABEL_SHARD)
                .and_then(|s| s.parse::<u32>().ok())
                .filter(|s| *s < self.config.shards)
            {
                seen.views.insert(shard, ShardLease { holder, expired });
                seen.shards.insert(shard, lease);
            }
        }
        // Forget Leases that are gone, so the map does not grow with dead replicas.
        self.observers.retain(|name, _| names.contains(name));
        Ok(seen)
    }

    async fn renew(&mut self, shard: u32, seen: &Seen, started: &impl Fn(u32)) {
        let Some(lease) = seen.shards.get(&shard) else {
            return;
        };
        match self.stopping.get(&shard).map(JoinHandle::is_finished) {
            // Its work is still being stopped (the Lease was overdue): the next
            // round takes it again.
            Some(false) => return,
            Some(true) => {
                self.stopping.remove(&shard);
            }
            None => {}
        }
        match self.write_holder(lease.clone(), true).await {
            Ok(()) => {
                if self.held.insert(shard, Instant::now()).is_none() {
                    // Ours from before a restart under the same identity.
                    self.take(shard, started).await;
                }
            }
            Err(error) => tracing::warn!(shard, %error, "could not renew the shard's Lease"),
        }
    }

    /// Stops the shard's work, keeps renewing its Lease meanwhile (so nobody takes
    /// it while it still writes), then releases it.
    async fn release(&mut self, shard: u32, seen: &Seen) {
        let Some(lease) = seen.shards.get(&shard) else {
            return;
        };
        if !self.stopping.contains_key(&shard) {
            tracing::info!(
                shard,
                "another replica should hold this shard: stopping its work to release it"
            );
            self.begin_stop(shard);
        }
        let done = self
            .stopping
            .get(&shard)
            .is_some_and(JoinHandle::is_finished);
        let mut released = lease.clone();
        if done {
            if let Some(spec) = released.spec.as_mut() {
                spec.holder_identity = None;
            }
            match self
                .api
                .replace(&released.name_any(), &PostParams::default(), &released)
                .await
            {
                Ok(_) => {
                    tracing::info!(shard, "shard released");
                    self.held.remove(&shard);
                    self.stopping.remove(&shard);
                }
                Err(error) => tracing::warn!(shard, %error, "could not release the shard's Lease"),
            }
        } else if self.write_holder(released, true).await.is_ok() {
            self.held.insert(shard, Instant::now());
        }
    }

    async fn acquire(&mut self, shard: u32, seen: &Seen, started: &impl Fn(u32)) {
        if self.stopping.get(&shard).is_some_and(|t| !t.is_finished()) {
            // Its earlier work is still being stopped here.
            return;
        }
        let result = match seen.shards.get(&shard) {
            Some(lease) => self.write_holder(lease.clone(), false).await,
            None => self.create_shard_lease(shard).await,
        };
        match result {
            Ok(()) => {
                tracing::info!(shard, "shard taken");
                self.stopping.remove(&shard);
                self.held.insert(shard, Instant::now());
                self.take(shard, started).await;
            }
            // Taken by another replica first (409): the next round sees it.
            Err(error) => tracing::debug!(shard, %error, "shard not taken"),
        }
    }

    async fn take(&self, shard: u32, started: &impl Fn(u32)) {
        self.gates.set(shard, true).await;
        started(shard);
    }

    /// Closes the shard's gate and stops its work, in the background.
    fn begin_stop(&mut self, shard: u32) {
        let (gates, stop) = (Arc::clone(&self.gates), Arc::clone(&self.stop));
        self.stopping.insert(
            shard,
            tokio::spawn(async move {
                gates.set(shard, false).await;
                stop(shard).await;
            }),
        );
    }

    /// Shards not renewed within the renew deadline: their work stops before any
    /// other replica may take them.
    fn stop_overdue(&mut self) {
        let deadline = self.config.renew_deadline();
        let overdue: Vec<u32> = self
            .held
            .iter()
            .filter(|(_, renewed)| renewed.elapsed() >= deadline)
            .map(|(shard, _)| *shard)
            .collect();
        for shard in overdue {
            tracing::error!(
                shard,
                "could not renew the shard's Lease before the deadline; stopping its work"
            );
            self.held.remove(&shard);
            self.begin_stop(shard);
        }
    }

    /// Writes this replica as the holder over the Lease as read (its
    /// resourceVersion makes a concurrent taker fail with 409).
    async fn write_holder(&self, mut lease: Lease, ours: bool) -> Result<(), kube::Error> {
        let now = MicroTime(Timestamp::now());
        let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
        if !ours {
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(spec.lease_transitions.unwrap_or(0).saturating_add(1));
        }
        spec.holder_identity = Some(self.config.holder.clone());
        spec.lease_duration_seconds = Some(self.config.lease_seconds());
        spec.renew_time = Some(now);
        self.api
            .replace(&lease.name_any(), &PostParams::default(), &lease)
            .await
            .map(|_| ())
    }

    fn lease(&self, name: String, labels: BTreeMap<String, String>) -> Lease {
        let now = MicroTime(Timestamp::now());
        Lease {
            metadata: ObjectMeta {
                name: Some(name),
                namespace: Some(self.config.namespace.clone()),
                labels: Some(labels),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.holder.clone()),
                lease_duration_seconds: Some(self.config.lease_seconds()),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        }
    }

    async fn create_shard_lease(&self, shard: u32) -> Result<(), kube::Error> {
        let labels = BTreeMap::from([
            (LABEL_SHARD_GROUP.to_owned(), self.config.group.clone()),
            (LABEL_SHARD.to_owned(), shard.to_string()),
        ]);
        let lease = self.lease(self.config.shard_lease_name(shard), labels);
        self.api
            .create(&PostParams::default(), &lease)
            .await
            .map(|_| ())
    }

    async fn renew_replica_lease(&self) -> Result<(), kube::Error> {
        let name = self.config.replica_lease_name();
        let labels = BTreeMap::from([
            (LABEL_SHARD_GROUP.to_owned(), self.config.group.clone()),
            (LABEL_REPLICA.to_owned(), self.config.shards.to_string()),
        ]);
        match self.api.get_opt(&name).await? {
            Some(mut lease) => {
                // The shard count it runs with now (a restart may have changed it).
                lease.metadata.labels = Some(labels);
                self.write_holder(lease, true).await
            }
            None => {
                let lease = self.lease(name, labels);
                self.api
                    .create(&PostParams::default(), &lease)
                    .await
                    .map(|_| ())
            }
        }
    }

    /// A clean shutdown: every held shard's work stops, then its Lease and this
    /// replica's own are given up, so the others take over at once.
    async fn leave(mut self) {
        let held: Vec<u32> = self.held.keys().copied().collect();
        for shard in &held {
            if !self.stopping.contains_key(shard) {
                self.begin_stop(*shard);
            }
        }
        for (_, task) in std::mem::take(&mut self.stopping) {
            let _ = task.await;
        }
        for shard in held {
            leader::release(
                &self.api,
                &self.config.shard_lease_name(shard),
                &self.config.holder,
            )
            .await;
        }
        if let Err(error) = self
            .api
            .delete(&self.config.replica_lease_name(), &DeleteParams::default())
            .await
        {
            tracing::warn!(%error, "could not delete this replica's Lease; it expires by itself");
        }
        tracing::info!(group = %self.config.group, "left the shard group");
    }
}
