//! TenantClusters divided between controller replicas: the shard a TenantCluster
//! is in, the live replica each shard should go to, and what one replica does next
//! with the shard Leases it sees. The Lease reads and writes are the engine's.
//!
//! A shard goes to its rendezvous-hash winner among the live replicas: when one
//! joins or leaves, only the shards it wins or held move. A replica releases a shard
//! it holds but no longer wins (after stopping its work there) and takes one it wins
//! only once the Lease is free or expired, so no shard ever has two writers.

use std::collections::{BTreeMap, BTreeSet};

use sha2::{Digest, Sha256};

/// The first eight bytes of SHA-256 over `input`: stable across versions and
/// platforms, since replicas of different builds must agree.
fn hash64(input: &str) -> u64 {
    let digest = Sha256::digest(input.as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_be_bytes(bytes)
}

/// A name-safe, fixed-length key for a replica's identity (a pod name plus a
/// prefix could pass the 253-character name limit).
pub fn replica_key(holder: &str) -> String {
    crate::hex::short_hex(Sha256::digest(holder.as_bytes()), 8)
}

/// The shard of the TenantCluster `namespace/name` among `shards` (at least 1).
pub fn shard_of(namespace: &str, name: &str, shards: u32) -> u32 {
    let shards = u64::from(shards.max(1));
    // The remainder is below `shards`, itself a u32.
    u32::try_from(hash64(&format!("{namespace}/{name}")) % shards).unwrap_or(0)
}

/// The live replica that should hold `shard`: the highest rendezvous score, ties
/// (practically impossible) to the smaller name. `None` without replicas.
pub fn preferred_holder<'a>(
    shard: u32,
    replicas: impl IntoIterator<Item = &'a str>,
) -> Option<&'a str> {
    replicas
        .into_iter()
        .map(|replica| (hash64(&format!("{shard}/{replica}")), replica))
        .max_by(|(a, ra), (b, rb)| a.cmp(b).then_with(|| rb.cmp(ra)))
        .map(|(_, replica)| replica)
}

/// A shard Lease as one replica sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardLease {
    /// `None` (or empty) once released.
    pub holder: Option<String>,
    /// Unchanged for a whole lease duration of the observer's own clock.
    pub expired: bool,
}

impl ShardLease {
    /// Whether anyone may take it: released, or its holder stopped renewing.
    fn is_free(&self) -> bool {
        self.expired || self.holder.as_deref().is_none_or(str::is_empty)
    }
}

/// What one replica does with one shard this round.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum ShardAction {
    /// Ours and still ours: renew the Lease.
    Renew(u32),
    /// Ours, but another live replica wins it now: stop its work, then release.
    Release(u32),
    /// Ours to take: free or expired (or never created).
    Acquire(u32),
}

/// The actions of replica `me` over `shards` shards, given the live replicas
/// (`me` counts as live) and the shard Leases it read (absent: never created).
/// A shard held by another replica that has not expired is left alone, even when
/// `me` wins it: its holder releases it once it sees `me`.
pub fn plan_shards(
    me: &str,
    shards: u32,
    live: &BTreeSet<String>,
    leases: &BTreeMap<u32, ShardLease>,
) -> Vec<ShardAction> {
    let replicas: BTreeSet<&str> = live
        .iter()
        .map(String::as_str)
        .chain(std::iter::once(me))
        .collect();
    (0..shards)
        .filter_map(|shard| {
            let mine = preferred_holder(shard, replicas.iter().copied()) == Some(me);
            let lease = leases.get(&shard);
            let held = lease.is_some_and(|l| l.holder.as_deref() == Some(me));
            match (held, mine) {
                (true, true) => Some(ShardAction::Renew(shard)),
                (true, false) => Some(ShardAction::Release(shard)),
                (false, true) if lease.is_none_or(ShardLease::is_free) => {
                    Some(ShardAction::Acquire(shard))
                }
                (false, _) => None,
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn names(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("replica-{i}")).collect()
    }

    fn held(holder: &str) -> ShardLease {
        ShardLease {
            holder: Some(holder.to_owned()),
            expired: false,
        }
    }

    #[test]
    fn shards_are_stable_and_in_range() {
        // Fixed: replicas of different versions must put a TenantCluster in the
        // same shard.
        assert_eq!(
            shard_of("team-dev", "dev", 16),
            shard_of("team-dev", "dev", 16)
        );
        assert_eq!(shard_of("a", "b", 1), 0);
        assert_eq!(shard_of("a", "b", 0), 0, "zero shards are treated as one");
        assert_ne!(
            (0..64)
                .map(|i| shard_of("ns", &format!("tc-{i}"), 8))
                .collect::<BTreeSet<_>>()
                .len(),
            1,
            "names spread over the shards"
        );
    }

    #[test]
    fn one_replica_takes_every_free_shard_and_renews_its_own() {
        let live = BTreeSet::new();
        let mut leases = BTreeMap::new();
        leases.insert(1, held("me"));
        leases.insert(
            2,
            ShardLease {
                holder: None,
                expired: false,
            },
        );
        assert_eq!(
            plan_shards("me", 3, &live, &leases),
            vec![
                ShardAction::Acquire(0),
                ShardAction::Renew(1),
                ShardAction::Acquire(2)
            ]
        );
    }

    #[test]
    fn a_shard_held_by_a_live_replica_waits_for_its_release() {
        let live: BTreeSet<String> = ["a".to_owned(), "b".to_owned()].into();
        // Find a shard that "b" wins; "a" holds it.
        let shard = (0..64)
            .find(|s| preferred_holder(*s, ["a", "b"]) == Some("b"))
            .unwrap();
        let leases = BTreeMap::from([(shard, held("a"))]);
        let b = plan_shards("b", shard + 1, &live, &leases);
        assert!(!b.contains(&ShardAction::Acquire(shard)), "{b:?}");
        let a = plan_shards("a", shard + 1, &live, &leases);
        assert!(a.contains(&ShardAction::Release(shard)), "{a:?}");
        // Once released (or expired), b takes it.
        for lease in [
            ShardLease {
                holder: None,
                expired: false,
            },
            ShardLease {
                holder: Some("a".into()),
                expired: true,
            },
        ] {
            let leases = BTreeMap::from([(shard, lease)]);
            assert!(
                plan_shards("b", shard + 1, &live, &leases).contains(&ShardAction::Acquire(shard))
            );
        }
    }

    #[test]
    fn an_empty_holder_counts_as_released() {
        let lease = ShardLease {
            holder: Some(String::new()),
            expired: false,
        };
        assert!(lease.is_free());
        assert!(!held("x").is_free());
    }

    /// Replicas take turns planning against one set of Leases and applying their
    /// plans the way Lease writes would (a take succeeds only when free).
    fn simulate(
        replicas: &[String],
        shards: u32,
        leases: &mut BTreeMap<u32, ShardLease>,
        rounds: usize,
    ) {
        let live: BTreeSet<String> = replicas.iter().cloned().collect();
        for _ in 0..rounds {
            for me in replicas {
                for action in plan_shards(me, shards, &live, leases) {
                    match action {
                        ShardAction::Renew(s) => {
                            leases.insert(s, held(me));
                        }
                        ShardAction::Release(s) => {
                            leases.insert(
                                s,
                                ShardLease {
                                    holder: None,
                                    expired: false,
                                },
                            );
                        }
                        ShardAction::Acquire(s) => {
                            let free = leases.get(&s).is_none_or(ShardLease::is_free);
                            assert!(free, "{me} took shard {s} while it was held");
                            leases.insert(s, held(me));
                        }
                    }
                }
            }
        }
    }

    proptest! {
        #[test]
        fn every_shard_has_exactly_one_preferred_live_replica(n in 1usize..8, shard in 0u32..1000) {
            let replicas = names(n);
            let winner = preferred_holder(shard, replicas.iter().map(String::as_str));
            prop_assert!(winner.is_some_and(|w| replicas.iter().any(|r| r == w)));
        }

        #[test]
        fn a_replica_leaving_moves_only_its_own_shards(n in 2usize..8, gone in 0usize..8, shards in 1u32..64) {
            let replicas = names(n);
            let gone = replicas[gone % n].as_str();
            let rest: Vec<&str> = replicas.iter().map(String::as_str).filter(|r| *r != gone).collect();
            for shard in 0..shards {
                let before = preferred_holder(shard, replicas.iter().map(String::as_str)).unwrap();
                let after = preferred_holder(shard, rest.iter().copied()).unwrap();
                if before != gone {
                    prop_assert_eq!(before, after);
                }
            }
        }

        #[test]
        fn replicas_converge_to_one_holder_per_shard_from_any_start(
            n in 1usize..6,
            shards in 1u32..40,
            start in proptest::collection::btree_map(0u32..40, (0usize..8, any::<bool>()), 0..40),
        ) {
            let replicas = names(n);
            // Any earlier state: held by live or dead replicas, expired or not; a
            // dead replica's Lease is seen expired once its term passes.
            let mut leases: BTreeMap<u32, ShardLease> = start
                .into_iter()
                .filter(|(s, _)| *s < shards)
                .map(|(s, (holder, expired))| {
                    let name = format!("replica-{holder}");
                    let dead = holder >= n;
                    (s, ShardLease { holder: Some(name), expired: expired || dead })
                })
                .collect();
            simulate(&replicas, shards, &mut leases, 2);
            for shard in 0..shards {
                let want = preferred_holder(shard, replicas.iter().map(String::as_str)).unwrap();
                prop_assert_eq!(leases.get(&shard).and_then(|l| l.holder.as_deref()), Some(want));
            }
        }
    }
}
