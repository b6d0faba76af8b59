//! The Pod path's settings and state, apart from what the Pod path does, so the
//! modules that finalize, copy and collect Pod dependencies reach them without
//! depending on the Pod module.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::runtime::events::{Recorder, Reporter};
use tenantplane_core::kinds::GroupKind;
use tenantplane_core::pods::{HostPodContext, NodeView, PodControls, PodDns, TenantApiEndpoint};

use super::dependency_cache::{DependencyCaches, DependencyRef};
use super::outage::HostOutages;
use crate::queue::WorkQueue;

/// How long a tenant object being deleted waits for a host API server that does
/// not answer before its finalizer is released anyway.
pub const DEFAULT_HOST_UNREACHABLE_RELEASE: Duration = Duration::from_secs(120);

/// What the Pod path needs beyond a kind's syncer.
#[derive(Clone, Debug)]
pub struct PodSettings {
    pub controls: PodControls,
    /// The tenant API server's URL, as Pods on the host reach it.
    pub endpoint: Option<String>,
    /// Kinds the SyncPolicy syncs for their own sake: their copies are never
    /// removed by reference counting.
    pub synced_kinds: BTreeSet<GroupKind>,
    /// A tenant Pod (or dependency) being deleted while the host does not answer
    /// keeps its finalizer at most this long.
    pub host_unreachable_release: Duration,
    /// The cluster domain of the tenant's DNS server; `Some` makes every host Pod
    /// resolve through it (and wait until its Service has an IP).
    pub dns_domain: Option<String>,
    /// The profile's `controls.allowedIngressClasses` (absent allows any).
    pub allowed_ingress_classes: Option<Vec<String>>,
    /// How the tenant's Nodes are named and what they advertise.
    pub nodes: NodeView,
}

impl Default for PodSettings {
    fn default() -> Self {
        Self {
            controls: PodControls::default(),
            endpoint: None,
            synced_kinds: BTreeSet::new(),
            host_unreachable_release: DEFAULT_HOST_UNREACHABLE_RELEASE,
            dns_domain: None,
            allowed_ingress_classes: None,
            nodes: NodeView::default(),
        }
    }
}

/// The Pod path's state, built once per syncer.
pub(super) struct PodPath {
    pub(super) context: HostPodContext,
    /// See [`PodSettings::dns_domain`].
    pub(super) dns_domain: Option<String>,
    pub(super) synced_kinds: BTreeSet<GroupKind>,
    pub(super) events: Recorder,
    pub(super) outages: HostOutages,
    /// Tenant dependencies being deleted, to finalize.
    pub(super) dependencies: Arc<WorkQueue<DependencyRef>>,
    /// The dependencies on both sides, and who uses which.
    pub(super) caches: Arc<DependencyCaches>,
    /// Held while a tenant Node is made and a Pod bound to it, and while unused
    /// Nodes are collected: a collection that read the Pods before a binding and
    /// the Nodes after it would otherwise delete the Node just bound to.
    pub(super) nodes: tokio::sync::Mutex<()>,
}

impl PodPath {
    pub(super) fn new(settings: PodSettings, tenant: Client) -> Self {
        let reporter = Reporter {
            controller: "tenantplane.io/sync-engine".into(),
            instance: None,
        };
        Self {
            context: HostPodContext {
                controls: settings.controls,
                api_endpoint: settings
                    .endpoint
                    .as_deref()
                    .and_then(TenantApiEndpoint::from_url),
                dns: PodDns::Unchanged,
            },
            dns_domain: settings.dns_domain,
            synced_kinds: settings.synced_kinds,
            events: Recorder::new(tenant, reporter),
            outages: HostOutages::new(settings.host_unreachable_release),
            dependencies: WorkQueue::new(),
            caches: Arc::new(DependencyCaches::new()),
            nodes: tokio::sync::Mutex::new(()),
        }
    }
}
