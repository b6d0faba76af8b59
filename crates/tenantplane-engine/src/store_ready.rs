//! Readiness of a reflector store that any number of tasks may await.
//!
//! kube's `Store::wait_until_ready` is a oneshot receiver behind a lock: of several
//! tasks waiting at once only the last to poll is woken, and the others wait
//! forever. The Tenant controller's concurrent reconciles all waited there, so after
//! a restart one Tenant could hang in its first reconcile and never be revoked.
//! Here one task waits on the store and fires a token every waiter can await.

use kube::Resource;
use kube::runtime::reflector::Store;
use tokio_util::sync::CancellationToken;

#[derive(Clone, Debug)]
pub struct StoreReady(CancellationToken);

impl StoreReady {
    /// Starts the one task that waits on `store`. (If the store's writer is dropped
    /// before its first list, it never becomes ready, as with the store itself.)
    pub fn watch<K>(store: Store<K>) -> Self
    where
        K: Resource + Clone + Send + Sync + 'static,
        K::DynamicType: std::hash::Hash + Eq + Clone + Send + Sync,
    {
        let token = CancellationToken::new();
        let fire = token.clone();
        tokio::spawn(async move {
            if store.wait_until_ready().await.is_ok() {
                fire.cancel();
            }
        });
        Self(token)
    }

    /// Returns once the store holds its first complete list.
    pub async fn wait(&self) {
        self.0.cancelled().await;
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::core::v1::ConfigMap;
    use kube::runtime::{reflector, watcher};

    use super::*;

    #[tokio::test]
    async fn every_concurrent_waiter_is_woken() {
        let (store, mut writer) = reflector::store::<ConfigMap>();
        let ready = StoreReady::watch(store);
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let ready = ready.clone();
                tokio::spawn(async move { ready.wait().await })
            })
            .collect();
        // Every waiter is parked before the list completes.
        tokio::task::yield_now().await;
        writer.apply_watcher_event(&watcher::Event::Init);
        writer.apply_watcher_event(&watcher::Event::InitDone);
        for waiter in waiters {
            tokio::time::timeout(Duration::from_secs(5), waiter)
                .await
                .expect("a waiter was never woken")
                .expect("the waiter task");
        }
        // And a late one returns at once.
        tokio::time::timeout(Duration::from_secs(1), ready.wait())
            .await
            .expect("ready stays ready");
    }
}
