//! A work queue with client-go's guarantees: a key waiting to be processed is held
//! once however often it is added, and a key is never processed by two workers at
//! once (one added while in flight is processed again afterwards). Delayed adds
//! (retries with backoff) wait in the queue itself, not in a sleeping task each:
//! the workers waiting for work also wait for the earliest of them.
//!
//! Hand-written rather than kube-runtime's scheduler: the engine's keys are its own
//! (`Work`, dependency keys), not `ObjectRef`s of one watched kind.

use std::collections::{HashMap, HashSet, VecDeque};
use std::hash::Hash;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

pub struct WorkQueue<K> {
    inner: Mutex<Inner<K>>,
    notify: Notify,
}

struct Inner<K> {
    queue: VecDeque<K>,
    /// Keys waiting: in `queue`, or to be re-queued when their processing ends.
    dirty: HashSet<K>,
    processing: HashSet<K>,
    /// Keys to add when their time comes: the earliest time asked for each.
    delayed: HashMap<K, Instant>,
    shut_down: bool,
}

impl<K: Clone + Eq + Hash> Inner<K> {
    /// Adds `key` unless it is already waiting; whether a worker should be woken.
    fn add(&mut self, key: K) -> bool {
        if self.shut_down || !self.dirty.insert(key.clone()) {
            return false;
        }
        if self.processing.contains(&key) {
            return false;
        }
        self.queue.push_back(key);
        true
    }

    /// Adds the delayed keys whose time has come; how many joined the queue.
    fn add_due(&mut self, now: Instant) -> usize {
        if self.delayed.is_empty() {
            return 0;
        }
        let due: Vec<K> = self
            .delayed
            .iter()
            .filter(|(_, at)| **at <= now)
            .map(|(key, _)| key.clone())
            .collect();
        let mut added = 0;
        for key in due {
            self.delayed.remove(&key);
            if self.add(key) {
                added += 1;
            }
        }
        added
    }
}

impl<K: Clone + Eq + Hash + Send + 'static> WorkQueue<K> {
    pub fn new() -> Arc<Self> {
        Arc::new(Self {
            inner: Mutex::new(Inner {
                queue: VecDeque::new(),
                dirty: HashSet::new(),
                processing: HashSet::new(),
                delayed: HashMap::new(),
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
        let wake = self.lock().add(key);
        if wake {
            self.notify.notify_one();
        }
    }

    /// Adds a key after `delay` (retries with backoff). A key already delayed keeps
    /// the earlier of its two times.
    pub fn add_after(&self, key: K, delay: Duration) {
        if delay.is_zero() {
            return self.add(key);
        }
        let at = Instant::now() + delay;
        {
            let mut inner = self.lock();
            if inner.shut_down {
                return;
            }
            let entry = inner.delayed.entry(key).or_insert(at);
            *entry = (*entry).min(at);
        }
        // A waiting worker looks again at when the earliest delayed key is due.
        self.notify.notify_one();
    }

    /// The next key to process, or `None` once shut down. Call [`WorkQueue::done`] after.
    pub async fn next(&self) -> Option<K> {
        loop {
            let notified = self.notify.notified();
            let wake_at = {
                let mut inner = self.lock();
                let added = inner.add_due(Instant::now());
                if let Some(key) = inner.queue.pop_front() {
                    inner.dirty.remove(&key);
                    inner.processing.insert(key.clone());
                    drop(inner);
                    // The others that came due are for the other workers.
                    for _ in 1..added {
                        self.notify.notify_one();
                    }
                    return Some(key);
                }
                if inner.shut_down {
                    return None;
                }
                inner.delayed.values().min().copied()
            };
            match wake_at {
                Some(at) => {
                    tokio::select! {
                        () = notified => {}
                        () = tokio::time::sleep_until(at) => {}
                    }
                }
                None => notified.await,
            }
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

    /// Keys delayed, not yet due.
    pub fn delayed(&self) -> usize {
        self.lock().delayed.len()
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
        let mut inner = self.lock();
        inner.shut_down = true;
        inner.delayed.clear();
        drop(inner);
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

    #[tokio::test(start_paused = true)]
    async fn a_delayed_key_is_handed_out_when_due_and_not_before() {
        let q: Arc<WorkQueue<&str>> = WorkQueue::new();
        let start = Instant::now();
        q.add_after("a", Duration::from_secs(5));
        q.add_after("a", Duration::from_secs(9)); // the earlier time stays
        assert_eq!(q.delayed(), 1);
        assert!(q.is_empty(), "not queued before it is due");
        assert_eq!(q.next().await, Some("a"));
        assert_eq!(start.elapsed(), Duration::from_secs(5));
        assert_eq!(q.delayed(), 0);
        q.done(&"a");
        // A delayed key already waiting is held once.
        q.add("b");
        q.add_after("b", Duration::from_secs(1));
        assert_eq!(q.next().await, Some("b"));
        assert_eq!(
            start.elapsed(),
            Duration::from_secs(5),
            "b was ready at once"
        );
        q.done(&"b");
        assert_eq!(q.next().await, Some("b"), "the delayed add comes later");
        assert_eq!(start.elapsed(), Duration::from_secs(6));
    }

    #[tokio::test(start_paused = true)]
    async fn a_worker_waiting_wakes_for_a_key_delayed_after_it_began_waiting() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new();
        let start = Instant::now();
        let worker = {
            let q = Arc::clone(&q);
            tokio::spawn(async move { (q.next().await, Instant::now()) })
        };
        tokio::task::yield_now().await;
        q.add_after(7, Duration::from_secs(30));
        q.add_after(8, Duration::from_secs(2));
        let (key, at) = worker.await.unwrap();
        assert_eq!(key, Some(8), "the earliest first");
        assert_eq!(at - start, Duration::from_secs(2));
        assert_eq!(q.delayed(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn keys_due_together_go_to_every_waiting_worker() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new();
        let workers: Vec<_> = (0..3)
            .map(|_| {
                let q = Arc::clone(&q);
                tokio::spawn(async move { q.next().await })
            })
            .collect();
        tokio::task::yield_now().await;
        for key in [1, 2, 3] {
            q.add_after(key, Duration::from_secs(1));
        }
        let mut got = Vec::new();
        for worker in workers {
            got.push(worker.await.unwrap().unwrap());
        }
        got.sort_unstable();
        assert_eq!(got, vec![1, 2, 3]);
    }

    #[tokio::test(start_paused = true)]
    async fn shut_down_drops_delayed_keys() {
        let q: Arc<WorkQueue<u32>> = WorkQueue::new();
        q.add_after(1, Duration::from_secs(1));
        q.shut_down();
        assert_eq!(q.next().await, None);
        q.add_after(2, Duration::from_secs(1));
        assert_eq!(q.delayed(), 0);
    }
}
