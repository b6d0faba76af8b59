//! Decisions: every Create, Update, Delete and Skip, with its reason.
//!
//! Each one is counted, logged, broadcast (for `tenantplane up`), emitted as an
//! Event on the TenantCluster and appended to its `SyncDecision`. Events are
//! rate-limited per TenantCluster and a hot object's repeats are folded, so a
//! busy tenant cannot flood the API server; what is not emitted as an Event is
//! still in the SyncDecision and counted in a summary Event.
//!
//! Two-way conflicts come through the same channel and are merged into the
//! SyncDecision's per-object conflict history (`status.conflicts`).

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use tenantplane_core::token_bucket::TokenBucket;

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Patch, PatchParams, PostParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client};
use serde_json::json;
use tenantplane_api::{
    ConflictHistory, ConflictRecord, DecisionAction, DecisionRecord, HostTarget, SyncDecision,
    SyncDecisionSpec, TenantObjectRef,
};
use tenantplane_core::three_way::{ConflictedObject, record_conflict};
use tokio::sync::{broadcast, mpsc};

use crate::metrics::{ActionLabels, Metrics};

/// The component name on Events and in field managers.
pub const MANAGER: &str = "tenantplane";

/// A decision with the TenantCluster it belongs to, as broadcast to watchers.
#[derive(Clone, Debug)]
pub struct TenantDecision {
    pub namespace: String,
    pub tenant: String,
    pub record: DecisionRecord,
}

/// What the recorder is sent, in the order it happened.
#[derive(Clone, Debug)]
pub enum Recorded {
    Decision(DecisionRecord),
    /// A two-way pass met a conflict, or a pass found a manual one ended.
    Conflict {
        object: ConflictedObject,
        record: ConflictRecord,
    },
}

/// Where the sync engine sends its decisions.
#[derive(Clone)]
pub struct DecisionSender {
    /// Boxed: an unbounded channel allocates its slots 32 at a time, and every
    /// TenantCluster keeps one open.
    tx: mpsc::UnboundedSender<Box<Recorded>>,
}

impl DecisionSender {
    #[allow(clippy::too_many_arguments)]
    pub fn send(
        &self,
        action: DecisionAction,
        api_version: &str,
        kind: &str,
        tenant: TenantObjectRef,
        host: HostTarget,
        reason: String,
    ) {
        let record = DecisionRecord {
            action,
            api_version: api_version.to_owned(),
            kind: kind.to_owned(),
            tenant,
            host,
            reason,
            time: Time(Timestamp::now()),
        };
        // The recorder outlives every engine task; a send after shutdown is dropped.
        let _ = self.tx.send(Box::new(Recorded::Decision(record)));
    }

    /// Adds to `object`'s conflict history (see [`record_conflict`] for what is kept).
    pub fn send_conflict(&self, object: ConflictedObject, record: ConflictRecord) {
        let _ = self
            .tx
            .send(Box::new(Recorded::Conflict { object, record }));
    }

    /// A sender whose decisions go nowhere but the returned receiver (tests).
    pub fn channel() -> (Self, mpsc::UnboundedReceiver<Box<Recorded>>) {
        let (tx, rx) = mpsc::unbounded_channel();
        (Self { tx }, rx)
    }
}

/// The decision senders of the running engines, by TenantCluster (namespace,
/// name), for components besides the engine that decide about a tenant's objects
/// (the kubelet endpoint's refusals). Their decisions go through the same recorder
/// as the engine's, so the SyncDecision has one writer.
#[derive(Clone, Default)]
pub struct DecisionRoutes(Arc<std::sync::RwLock<HashMap<(String, String), DecisionSender>>>);

impl DecisionRoutes {
    pub fn new() -> Self {
        Self::default()
    }

    pub(crate) fn set(&self, namespace: &str, name: &str, sender: DecisionSender) {
        let key = (namespace.to_owned(), name.to_owned());
        match self.0.write() {
            Ok(mut routes) => routes.insert(key, sender),
            Err(poisoned) => poisoned.into_inner().insert(key, sender),
        };
    }

    /// Drops the route; the recorder ends only once every sender is gone, so this
    /// comes before the engine is stopped.
    pub(crate) fn remove(&self, namespace: &str, name: &str) {
        let key = (namespace.to_owned(), name.to_owned());
        match self.0.write() {
            Ok(mut routes) => routes.remove(&key),
            Err(poisoned) => poisoned.into_inner().remove(&key),
        };
    }

    pub(crate) fn clear(&self) {
        match self.0.write() {
            Ok(mut routes) => routes.clear(),
            Err(poisoned) => poisoned.into_inner().clear(),
        }
    }

    /// The sender of the TenantCluster's running engine, if one runs.
    pub fn get(&self, namespace: &str, name: &str) -> Option<DecisionSender> {
        let key = (namespace.to_owned(), name.to_owned());
        match self.0.read() {
            Ok(routes) => routes.get(&key).cloned(),
            Err(poisoned) => poisoned.into_inner().get(&key).cloned(),
        }
    }
}

/// How one TenantCluster's decisions are kept.
pub struct RecorderConfig {
    pub host: Client,
    pub namespace: String,
    pub tenant: String,
    pub tenant_uid: String,
    /// Append to the SyncDecision (`explain.recordDecisions`).
    pub record: bool,
    /// Decisions kept in the SyncDecision (`explain.retain`).
    pub retain: usize,
    pub metrics: Arc<Metrics>,
    pub broadcast: broadcast::Sender<TenantDecision>,
    pub instance: String,
}

/// Events per TenantCluster: a burst, then a steady trickle.
const EVENT_BURST: f64 = 30.0;
const EVENTS_PER_SECOND: f64 = 2.0;
/// The same action on the same host object within this window is one Event.
const HOT_OBJECT_WINDOW: Duration = Duration::from_secs(30);
const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Starts the recorder task; it ends when every sender is dropped, after a last flush.
pub fn start_recorder(config: RecorderConfig) -> (DecisionSender, tokio::task::JoinHandle<()>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let handle = tokio::spawn(run_recorder(config, rx));
    (DecisionSender { tx }, handle)
}

struct EventBudget {
    bucket: TokenBucket,
    recent: HashMap<(String, DecisionAction), Instant>,
    suppressed: u64,
}

impl EventBudget {
    fn allow(&mut self, host_name: &str, action: DecisionAction) -> bool {
        let now = Instant::now();
        self.recent
            .retain(|_, at| now.duration_since(*at) < HOT_OBJECT_WINDOW);
        let key = (host_name.to_owned(), action);
        // A hot object is suppressed without spending a token.
        if self.recent.contains_key(&key) || self.bucket.take(now).is_err() {
            self.suppressed += 1;
            return false;
        }
        self.recent.insert(key, now);
        true
    }

    fn take_summary_token(&mut self) -> bool {
        self.suppressed > 0 && self.bucket.take(Instant::now()).is_ok()
    }
}

async fn run_recorder(config: RecorderConfig, mut rx: mpsc::UnboundedReceiver<Box<Recorded>>) {
    let reporter = Reporter {
        controller: "tenantplane.io/sync-engine".into(),
        instance: Some(config.instance.clone()),
    };
    let recorder = Recorder::new(config.host.clone(), reporter);
    let reference = ObjectReference {
        api_version: Some("tenantplane.io/v1alpha1".into()),
        kind: Some("TenantCluster".into()),
        name: Some(config.tenant.clone()),
        namespace: Some(config.namespace.clone()),
        uid: Some(config.tenant_uid.clone()),
        ..ObjectReference::default()
    };
    let mut budget = EventBudget {
        bucket: TokenBucket::full(EVENTS_PER_SECOND, EVENT_BURST, Instant::now()),
        recent: HashMap::new(),
        suppressed: 0,
    };
    let mut log = DecisionLog::new(&config);
    let mut ticker = tokio::time::interval(FLUSH_EVERY);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tokio::select! {
            received = rx.recv() => {
                let record = match received.map(|boxed| *boxed) {
                    None => break,
                    Some(Recorded::Decision(record)) => record,
                    Some(Recorded::Conflict { object, record }) => {
                        if config.record {
                            log.conflict(object, record);
                        }
                        continue;
                    }
                };
                config.metrics.decisions.get_or_create(&ActionLabels { action: record.action.as_str() }).inc();
                tracing::info!(
                    tenant = %config.tenant, namespace = %config.namespace,
                    action = record.action.as_str(), kind = %record.kind,
                    tenant_object = %format!("{}/{}", record.tenant.namespace, record.tenant.name),
                    host_object = %format!("{}/{}", record.host.namespace, record.host.name),
                    reason = %record.reason, "decision"
                );
                let _ = config.broadcast.send(TenantDecision {
                    namespace: config.namespace.clone(),
                    tenant: config.tenant.clone(),
                    record: record.clone(),
                });
                if budget.allow(&record.host.name, record.action) {
                    publish(&recorder, &reference, &record).await;
                }
                if config.record {
                    log.push(record);
                }
            }
            _ = ticker.tick() => {
                log.flush().await;
                if budget.take_summary_token() {
                    // The Events recorder folds repeats into one series that keeps
                    // its first note, so the note carries no count (it would go
                    // stale); the exact count is the metric's.
                    let note = format!(
                        "some decisions were not emitted as Events to protect the API server \
                         (tenantplane_decision_events_suppressed_total counts them); \
                         every decision is in SyncDecision {}/{}",
                        config.namespace, config.tenant
                    );
                    config.metrics.events_suppressed.inc_by(budget.suppressed);
                    budget.suppressed = 0;
                    let event = Event { type_: EventType::Normal, reason: "DecisionsFolded".into(), note: Some(note), action: "Sync".into(), secondary: None };
                    if let Err(err) = recorder.publish(&event, &reference).await {
                        tracing::warn!(%err, tenant = %config.tenant, "could not publish an event");
                    }
                }
            }
        }
    }
    log.flush().await;
}

async fn publish(recorder: &Recorder, reference: &ObjectReference, record: &DecisionRecord) {
    if let Err(err) = recorder.publish(&decision_event(record), reference).await {
        tracing::warn!(%err, "could not publish a decision event");
    }
}

/// The Event of one decision. The host object is its `related` object: the
/// recorder folds Events with the same type, reason, action and objects into one
/// series that keeps the first note, so without it every Create of a TenantCluster
/// would count up on the Event of its first Create, naming that object only.
fn decision_event(record: &DecisionRecord) -> Event {
    let note = format!(
        "{} {}/{} -> {}/{}: {}",
        record.kind,
        record.tenant.namespace,
        record.tenant.name,
        record.host.namespace,
        record.host.name,
        record.reason
    );
    Event {
        type_: if record.action == DecisionAction::Delete {
            EventType::Warning
        } else {
            EventType::Normal
        },
        reason: record.action.as_str().into(),
        // Events notes are capped at 1 KiB by the API server.
        note: Some(note.chars().take(1000).collect()),
        action: "Sync".into(),
        secondary: Some(ObjectReference {
            api_version: Some(record.api_version.clone()),
            kind: Some(record.kind.clone()),
            namespace: Some(record.host.namespace.clone()),
            name: Some(record.host.name.clone()),
            ..ObjectReference::default()
        }),
    }
}

/// The SyncDecision: decisions kept in memory, written at most once a second.
struct DecisionLog {
    api: Api<SyncDecision>,
    name: String,
    namespace: String,
    owner: OwnerReference,
    retain: usize,
    decisions: VecDeque<DecisionRecord>,
    total: u64,
    /// Per-object conflict histories, as loaded and merged.
    conflicts: Vec<ConflictHistory>,
    /// Conflicts received, merged once the stored histories are loaded (a
    /// `Resolved` record needs the conflict it ends).
    pending_conflicts: Vec<(ConflictedObject, ConflictRecord)>,
    dirty: bool,
    loaded: bool,
}

impl DecisionLog {
    fn new(config: &RecorderConfig) -> Self {
        Self {
            api: Api::namespaced(config.host.clone(), &config.namespace),
            name: config.tenant.clone(),
            namespace: config.namespace.clone(),
            owner: OwnerReference {
                api_version: "tenantplane.io/v1alpha1".into(),
                kind: "TenantCluster".into(),
                name: config.tenant.clone(),
                uid: config.tenant_uid.clone(),
                controller: Some(true),
                block_owner_deletion: None,
            },
            retain: config.retain.max(1),
            decisions: VecDeque::new(),
            total: 0,
            conflicts: Vec::new(),
            pending_conflicts: Vec::new(),
            dirty: false,
            loaded: false,
        }
    }

    fn push(&mut self, record: DecisionRecord) {
        self.decisions.push_back(record);
        self.total += 1;
        while self.decisions.len() > self.retain {
            self.decisions.pop_front();
        }
        self.dirty = true;
    }

    fn conflict(&mut self, object: ConflictedObject, record: ConflictRecord) {
        self.pending_conflicts.push((object, record));
    }

    /// Reads what an earlier run kept, so a restart continues the history.
    async fn load(&mut self) -> Result<(), kube::Error> {
        if self.loaded {
            return Ok(());
        }
        match self.api.get_opt(&self.name).await? {
            Some(existing) => {
                let status = existing.status.unwrap_or_default();
                let mut earlier: VecDeque<DecisionRecord> = status.decisions.into();
                earlier.extend(self.decisions.drain(..));
                while earlier.len() > self.retain {
                    earlier.pop_front();
                }
                self.decisions = earlier;
                self.total += status.total;
                // After a failed write this run's histories are the newer ones.
                if self.conflicts.is_empty() {
                    self.conflicts = status.conflicts;
                }
            }
            None => {
                let mut sd = SyncDecision::new(
                    &self.name,
                    SyncDecisionSpec {
                        tenant_cluster: self.name.clone(),
                    },
                );
                sd.metadata.namespace = Some(self.namespace.clone());
                sd.metadata.owner_references = Some(vec![self.owner.clone()]);
                match self.api.create(&PostParams::default(), &sd).await {
                    Ok(_) => {}
                    Err(kube::Error::Api(status)) if status.code == 409 => {}
                    Err(err) => return Err(err),
                }
            }
        }
        self.loaded = true;
        Ok(())
    }

    async fn flush(&mut self) {
        if !self.dirty && self.pending_conflicts.is_empty() {
            return;
        }
        if let Err(err) = self.load().await {
            tracing::warn!(%err, sync_decision = %self.name, "could not read or create the SyncDecision; will retry");
            return;
        }
        for (object, record) in self.pending_conflicts.drain(..) {
            // An unchanged repeat changes nothing and costs no write.
            if record_conflict(&mut self.conflicts, &object, record) {
                self.dirty = true;
            }
        }
        if !self.dirty {
            return;
        }
        let last = self.decisions.back().map(|d| d.time.clone());
        let patch = json!({
            "status": {
                "decisions": self.decisions,
                "retained": self.decisions.len(),
                "total": self.total,
                "lastDecisionTime": last,
                "conflicts": self.conflicts,
            }
        });
        match self
            .api
            .patch_status(&self.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => self.dirty = false,
            Err(err) => {
                tracing::warn!(%err, sync_decision = %self.name, "could not write the SyncDecision; will retry");
                // It may have been deleted: look again next time.
                self.loaded = false;
            }
        }
    }
}

#[cfg(test)]
#[path = "decisions_tests.rs"]
mod tests;
