//! Prometheus metrics of the controller and its sync engines.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ResultLabels {
    /// Which controller: [`TENANT_CLUSTER_CONTROLLER`], [`TENANT_CONTROLLER`] or
    /// [`POOL_CONTROLLER`].
    pub controller: &'static str,
    pub result: &'static str,
}

/// The `controller` label of the TenantCluster controller.
pub const TENANT_CLUSTER_CONTROLLER: &str = "tenantcluster";
/// The `controller` label of the namespace-tenant (`Tenant`) controller.
pub const TENANT_CONTROLLER: &str = "tenant";
/// The `controller` label of the ResourcePool controller (one reconcile covers all
/// pools).
pub const POOL_CONTROLLER: &str = "resourcepool";

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ActionLabels {
    pub action: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct VerbLabels {
    pub verb: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    /// `copied`, `deduplicated`, `rate_limited` or `foreign`.
    pub outcome: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TenantLabels {
    pub tenant: String,
}

/// Every metric tenantplane exports, registered once per process.
pub struct Metrics {
    /// Reconciles by controller and result.
    pub reconciles: Family<ResultLabels, Counter>,
    /// Sync decisions by action.
    pub decisions: Family<ActionLabels, Counter>,
    /// Writes to the host API server by verb.
    pub host_writes: Family<VerbLabels, Counter>,
    /// Errors while syncing one object (each is retried).
    pub sync_errors: Counter,
    /// Keys waiting in the sync engines' work queues, per tenant.
    pub queue_depth: Family<TenantLabels, Gauge>,
    /// Seconds from a tenant change being seen to its host write completing.
    pub sync_latency: Histogram,
    /// Full convergence passes completed, per tenant (one per kind per pass).
    pub passes: Family<TenantLabels, Counter>,
    /// Decisions not emitted as Events (they are all in the SyncDecision).
    pub events_suppressed: Counter,
    /// 1 while the namespace webhook answers the provisioner guard's probes.
    pub namespace_webhook_up: Gauge,
    /// Host Events seen in TenantCluster namespaces, by what became of them.
    pub host_events: Family<OutcomeLabels, Counter>,
    /// Two-way passes by outcome: `planned`, or `unchanged` (both sides at the
    /// versions of the last pass with nothing to write; not planned again).
    pub two_way_passes: Family<OutcomeLabels, Counter>,
    /// 1 for each TenantCluster (`namespace/name`) whose sync engine runs in this
    /// replica (sharded replicas: each runs those of its shards).
    pub engines_running: Family<TenantLabels, Gauge>,
    /// Shards this replica holds (sharded replicas only).
    pub shards_held: Gauge,
}

impl Metrics {
    pub fn new(registry: &mut Registry) -> Self {
        let metrics = Self {
            reconciles: Family::default(),
            decisions: Family::default(),
            host_writes: Family::default(),
            sync_errors: Counter::default(),
            queue_depth: Family::default(),
            sync_latency: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
            passes: Family::default(),
            events_suppressed: Counter::default(),
            namespace_webhook_up: Gauge::default(),
            host_events: Family::default(),
            two_way_passes: Family::default(),
            engines_running: Family::default(),
            shards_held: Gauge::default(),
        };
        let r = registry.sub_registry_with_prefix("tenantplane");
        r.register(
            "reconciles",
            "Reconciles by controller and result",
            metrics.reconciles.clone(),
        );
        r.register(
            "decisions",
            "Sync decisions by action",
            metrics.decisions.clone(),
        );
        r.register(
            "host_writes",
            "Writes to the host API server by verb",
            metrics.host_writes.clone(),
        );
        r.register(
            "sync_errors",
            "Errors syncing one object (retried)",
            metrics.sync_errors.clone(),
        );
        r.register(
            "queue_depth",
            "Keys waiting in a tenant's sync queues",
            metrics.queue_depth.clone(),
        );
        r.register(
            "sync_latency_seconds",
            "From a tenant change seen to its host write done",
            metrics.sync_latency.clone(),
        );
        r.register(
            "sync_passes",
            "Full convergence passes completed per tenant and kind",
            metrics.passes.clone(),
        );
        r.register(
            "decision_events_suppressed",
            "Decisions not emitted as Events to protect the API server (all are in the SyncDecision)",
            metrics.events_suppressed.clone(),
        );
        r.register(
            "namespace_webhook_up",
            "1 while the namespace webhook answers (owners may create namespaces), else 0",
            metrics.namespace_webhook_up.clone(),
        );
        r.register(
            "host_events",
            "Host Events in TenantCluster namespaces: copied to a tenant Pod, deduplicated (counted into an existing tenant Event), rate_limited (dropped), foreign (not about a synced Pod; never copied)",
            metrics.host_events.clone(),
        );
        r.register(
            "two_way_passes",
            "Passes over bidirectional objects: planned, or unchanged (both sides as at the last pass with nothing to write; skipped)",
            metrics.two_way_passes.clone(),
        );
        r.register(
            "engines_running",
            "1 for each TenantCluster (namespace/name) whose sync engine runs in this replica",
            metrics.engines_running.clone(),
        );
        r.register(
            "shards_held",
            "Shards this replica holds (sharded replicas only)",
            metrics.shards_held.clone(),
        );
        metrics
    }

    /// Host Events with `outcome` so far.
    pub fn host_events_of(&self, outcome: &'static str) -> u64 {
        self.host_events
            .get_or_create(&OutcomeLabels { outcome })
            .get()
    }

    /// Two-way passes with `outcome` so far.
    pub fn two_way_passes_of(&self, outcome: &'static str) -> u64 {
        self.two_way_passes
            .get_or_create(&OutcomeLabels { outcome })
            .get()
    }

    /// Full passes completed for `tenant` (all its kinds together).
    pub fn passes_of(&self, tenant: &str) -> u64 {
        self.passes
            .get_or_create(&TenantLabels {
                tenant: tenant.to_owned(),
            })
            .get()
    }

    /// Metrics registered nowhere (tests, benchmarks).
    pub fn unregistered() -> Self {
        Self::new(&mut Registry::default())
    }
}
