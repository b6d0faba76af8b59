//! What a kind's two watches feed: keys of changed objects, host events matched
//! back to their tenant object, and the memory of deletes already sent.

use super::*;
use crate::status_alarm::WatchHealth;

impl KindSyncer {
    pub(super) fn key_of(object: &DynamicObject) -> Option<Key> {
        Some((
            object.metadata.namespace.clone()?,
            object.metadata.name.clone()?,
        ))
    }

    pub(super) fn enqueue_changed(&self, key: Key) {
        if is_system_namespace(&key.0) {
            return;
        }
        self.seen_at
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .entry(key.clone())
            .or_insert_with(Instant::now);
        self.queue.add(Work::Object(key));
    }

    /// Feeds one side's watch events into the queue. `key_of` maps an object to the
    /// tenant key it concerns; `changed` marks a tenant-side change (latency is
    /// measured from it).
    pub(super) async fn watch(
        self: Arc<Self>,
        side: &'static str,
        mut stream: impl futures::Stream<Item = Result<watcher::Event<DynamicObject>, watcher::Error>>
        + Unpin,
        key_of: impl Fn(&Self, &DynamicObject) -> Option<Key>,
        changed: bool,
    ) {
        // Only the tenant side wakes the TenantCluster: its reachability is the
        // tenant API server's.
        let mut health = (side == "tenant").then(WatchHealth::default);
        while let Some(event) = stream.next().await {
            if let Some(health) = &mut health
                && health.observe(event.is_ok())
            {
                self.ctx.status_alarm.raise();
            }
            match event {
                Ok(
                    watcher::Event::Apply(obj)
                    | watcher::Event::Delete(obj)
                    | watcher::Event::InitApply(obj),
                ) => match key_of(&self, &obj) {
                    Some(key) if changed => self.enqueue_changed(key),
                    Some(key) => self.queue.add(Work::Object(key)),
                    None => {}
                },
                // A re-list after a disconnect: objects deleted meanwhile are found
                // by the full pass it triggers.
                Ok(watcher::Event::InitDone) => self.full_pass(),
                Ok(watcher::Event::Init) => {}
                Err(err) => {
                    tracing::warn!(%err, side, kind = %self.group_kind, tenant = %self.ctx.target.tenant, "watch failed; retrying");
                }
            }
        }
    }

    /// The tenant key a host object maps back to, if it is one of ours.
    pub(super) fn key_of_host(&self, obj: &DynamicObject) -> Option<Key> {
        let name = obj.metadata.name.as_deref()?;
        let labels = obj.metadata.labels.clone().unwrap_or_default();
        let annotations = obj.metadata.annotations.clone().unwrap_or_default();
        let identity = source_in(
            name,
            &labels,
            &annotations,
            &self.ctx.target.tenant,
            &self.group_kind,
        )?;
        Some((identity.virtual_namespace, identity.name))
    }

    /// Whether `host` is tenantplane's copy of this tenant's `group_kind` object `key`.
    pub(super) fn is_copy(&self, group_kind: &GroupKind, key: &Key, host: &Value) -> bool {
        let (name, labels, annotations) = meta_of(host);
        let source = SourceKey {
            tenant: &self.ctx.target.tenant,
            virtual_namespace: &key.0,
            name: &key.1,
            group_kind,
        };
        is_copy_of(name, &labels, &annotations, &source)
    }

    /// Whether `host` is tenantplane's copy of tenant object `key` of this kind.
    pub(super) fn is_our_copy(&self, key: &Key, host: &Value) -> bool {
        self.is_copy(&self.group_kind, key, host)
    }

    /// A host watch event shows what is there: from now on the cache, not the record
    /// of our create, answers for that name. A relist (`InitDone`) clears every
    /// record: what it did not list is gone.
    pub(super) fn host_event_seen(&self, event: &watcher::Event<DynamicObject>) {
        self.forget_sent_deletes(event);
        let mut unseen = self
            .unseen_creates
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        match event {
            watcher::Event::Apply(obj)
            | watcher::Event::Delete(obj)
            | watcher::Event::InitApply(obj) => {
                if let Some(name) = obj.metadata.name.as_deref() {
                    unseen.remove(name);
                }
            }
            watcher::Event::InitDone => unseen.clear(),
            watcher::Event::Init => {}
        }
    }

    /// A delete sent is forgotten once its object is gone, replaced (another UID)
    /// or the watch lists anew (what it then still shows is asked about again).
    pub(super) fn forget_sent_deletes(&self, event: &watcher::Event<DynamicObject>) {
        let mut sent = self
            .sent_deletes
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if sent.is_empty() {
            return;
        }
        match event {
            watcher::Event::Delete(obj) => {
                if let Some(name) = obj.metadata.name.as_deref() {
                    sent.remove(name);
                }
            }
            watcher::Event::Apply(obj) | watcher::Event::InitApply(obj) => {
                if let Some(name) = obj.metadata.name.as_deref()
                    && sent.get(name).map(String::as_str) != obj.metadata.uid.as_deref()
                {
                    sent.remove(name);
                }
            }
            watcher::Event::Init => sent.clear(),
            watcher::Event::InitDone => {}
        }
    }
}
