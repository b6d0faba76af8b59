//! A work queue with client-go's guarantees: a key waiting to be processed is held
//! once however often it is added, and a key is never processed by two workers at
//! once (one added while in flight is processed again afterwards).

use std::collections::{HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;

pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
}

struct Inner<K> {
    queue: VecDeque<K>,
    /// Keys waiting: in `queue`, or to be re-queued when their processing ends.
    dirty: HashSet<K>,
    processing: HashSet<K>,
    shut_down: bool,
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                shut_down: false,
            }),
            notify: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner<K>> {
        // The queue holds no invariant a panicking holder could break half-way.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a key; a no-op if it is already waiting.
    pub fn add(&self, key: K) {
        let mut inner = self.lock();
        if inner.shut_down || !inner.dirty.insert(key.clone()) {
            return;
        }
        if !inner.processing.contains(&key) {
            inner.queue.push_back(key);
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// Adds a key after `delay` (retries with backoff).
    pub fn add_after(self: &Arc<Self>, key: K, delay: Duration) {
        let queue = Arc::clone(self);
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            queue.add(key);
        });
    }

    /// The next key to process, or `None` once shut down. Call [`WorkQueue::done`] after.
    pub async fn next(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            {
                let mut inner = self.lock();
                if let Some(key) = inner.queue.pop_front() {
                    inner.dirty.remove(&key);
                    inner.processing.insert(key.clone());
                    return Some(key);
                }
                if inner.shut_down {
                    return None;
                }
            }
            notified.await;
        }
    }

    /// Marks a key processed; re-queues it if it was added meanwhile.
    pub fn done(&self, key: &K) {
        let mut inner = self.lock();
        inner.processing.remove(key);
        if inner.dirty.contains(key) {
            inner.queue.push_back(key.clone());
            drop(inner);
            self.notify.notify_one();
        }
    }

    /// Keys waiting to be processed.
    pub fn len(&self) -> usize {
        self.lock().queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Keys waiting or being processed: zero means everything added has been handled.
    pub fn outstanding(&self) -> usize {
        let inner = self.lock();
        inner.queue.len() + inner.processing.len()
    }

    /// Wakes every waiting worker with `None`.
    pub fn shut_down(&self) {
        self.lock().shut_down = true;
        self.notify.notify_waiters();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn keys_are_deduplicated_and_never_processed_twice_at_once() {
        let q = WorkQueue::new();
        q.add("a");
        q.add("a");
        q.add("b");
        assert_eq!(q.len(), 2);
        let first = q.next().await.unwrap();
        assert_eq!(first, "a");
        q.add("a"); // while in flight: held back
        let second = q.next().await.unwrap();
        assert_eq!(second, "b");
        assert!(q.is_empty(), "a is not handed out while in flight");
        q.done(&"a");
        assert_eq!(q.next().await, Some("a"), "re-queued after done");
        q.done(&"a");
        q.done(&"b");
        assert_eq!(q.outstanding(), 0);
    }

    #[tokio::test]
    async fn shut_down_wakes_workers() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new();
        let worker = {
            let q = Arc::clone(&q);
            tokio::spawn(async move { q.next().await })
        };
        tokio::task::yield_now().await;
        q.shut_down();
        assert_eq!(worker.await.unwrap(), None);
    }
}
