//! Leader election through a `coordination.k8s.io/v1` Lease, so two controller
//! replicas never both write.
//!
//! The holder renews the Lease every `renew_every`; a candidate takes it over only
//! once it has seen the Lease unchanged for `leaseDurationSeconds` of its *own*
//! clock (as client-go does): the holder's `renewTime` is never compared with the
//! local clock, so clocks that disagree cannot make a live lease look expired. A
//! leader that has not renewed within `renew_deadline` (shorter than the lease
//! duration) stops its work before any other replica may start: the two never
//! overlap.

use std::future::Future;
use std::time::Duration;

use tokio::time::Instant;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio_util::sync::CancellationToken;

/// Timings of the election.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    pub namespace: String,
    pub name: String,
    /// This replica's identity (the pod name).
    pub holder: String,
    pub lease_duration: Duration,
    pub renew_every: Duration,
    /// A leader stops working when it could not renew for this long.
    pub renew_deadline: Duration,
    pub retry_every: Duration,
}

impl LeaseConfig {
    pub fn new(namespace: &str, name: &str, holder: &str) -> Self {
        Self {
            namespace: namespace.to_owned(),
            name: name.to_owned(),
            holder: holder.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_every: Duration::from_secs(5),
            renew_deadline: Duration::from_secs(10),
            retry_every: Duration::from_secs(2),
        }
    }

    /// With a lease of `duration`: renewed every third of it, work stopped after two
    /// thirds without a renewal (15 s gives the defaults above).
    pub fn with_duration(self, duration: Duration) -> Self {
        Self {
            lease_duration: duration,
            renew_every: renew_every(duration),
            renew_deadline: renew_deadline(duration),
            ..self
        }
    }
}

/// How often a holder renews a Lease of `duration`.
pub fn renew_every(duration: Duration) -> Duration {
    duration / 3
}

/// How long a holder may fail to renew a Lease of `duration` before it stops its
/// work: it must be done before anyone else may see the Lease expired.
pub fn renew_deadline(duration: Duration) -> Duration {
    duration * 2 / 3
}

/// When this replica last saw the Lease change, by its own monotonic clock. A
/// Lease is a record of who holds it and when they renewed; any write changes its
/// resourceVersion, so "unchanged" is "same resourceVersion".
#[derive(Debug, Default)]
pub struct LeaseObserver {
    seen: Option<(String, Instant)>,
}

impl LeaseObserver {
    /// Records the Lease at `resource_version`, read at `now`, and says whether its
    /// holder's term has run out: unchanged for at least `duration` since this
    /// replica first saw this version. A version seen for the first time is never
    /// expired (the holder may have renewed just now, whatever its clock says).
    pub fn expired(&mut self, resource_version: &str, now: Instant, duration: Duration) -> bool {
        match &self.seen {
            Some((version, since)) if version == resource_version => {
                now.saturating_duration_since(*since) >= duration
            }
            _ => {
                self.seen = Some((resource_version.to_owned(), now));
                false
            }
        }
    }
}

/// Whether the lease went to us, and its resourceVersion for the next renewal.
enum Attempt {
    Acquired,
    HeldByOther(String),
}

/// Runs `work` whenever this replica holds the Lease, until `shutdown`. `work` is
/// given a token that fires when leadership is lost; it must stop writing then.
pub async fn run_as_leader<F, Fut>(
    client: Client,
    config: LeaseConfig,
    shutdown: CancellationToken,
    mut work: F,
) where
    F: FnMut(CancellationToken) -> Fut,
    Fut: Future<Output = ()> + Send + 'static,
{
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut announced_other = None;
    let mut observer = LeaseObserver::default();
    while !shutdown.is_cancelled() {
        match try_acquire(&api, &config, &mut observer).await {
            Ok(Attempt::Acquired) => {
                tracing::info!(lease = %config.name, holder = %config.holder, "became leader");
                announced_other = None;
                let lost = shutdown.child_token();
                let task = tokio::spawn(work(lost.clone()));
                let mut last_renewed = tokio::time::Instant::now();
                loop {
                    tokio::select! {
                        _ = shutdown.cancelled() => break,
                        _ = tokio::time::sleep(config.renew_every) => {}
                    }
                    match try_acquire(&api, &config, &mut observer).await {
                        Ok(Attempt::Acquired) => last_renewed = tokio::time::Instant::now(),
                        Ok(Attempt::HeldByOther(holder)) => {
                            tracing::warn!(%holder, "lost the lease to another replica");
                            break;
                        }
                        Err(err) if last_renewed.elapsed() < config.renew_deadline => {
                            tracing::warn!(%err, "could not renew the lease; retrying");
                        }
                        Err(err) => {
                            tracing::error!(%err, "could not renew the lease before the deadline; stepping down");
                            break;
                        }
                    }
                }
                lost.cancel();
                let _ = task.await;
                if shutdown.is_cancelled() {
                    release(&api, &config.name, &config.holder).await;
                }
            }
            Ok(Attempt::HeldByOther(holder)) => {
                if announced_other.as_ref() != Some(&holder) {
                    tracing::info!(%holder, "another replica leads; standing by");
                    announced_other = Some(holder);
                }
                tokio::select! {
                    _ = shutdown.cancelled() => {}
                    _ = tokio::time::sleep(config.retry_every) => {}
                }
            }
            Err(err) => {
                tracing::warn!(%err, "could not read or take the lease; retrying");
                tokio::select! {
                    _ = shutdown.cancelled() => {}
                    _ = tokio::time::sleep(config.retry_every) => {}
                }
            }
        }
    }
}

fn lease_seconds(config: &LeaseConfig) -> i32 {
    i32::try_from(config.lease_duration.as_secs()).unwrap_or(i32::MAX)
}

/// Takes or renews the lease. Every write carries the read resourceVersion, so two
/// candidates racing for an expired lease cannot both win.
async fn try_acquire(
    api: &Api<Lease>,
    config: &LeaseConfig,
    observer: &mut LeaseObserver,
) -> Result<Attempt, kube::Error> {
    // Written into the Lease for people and other tools; never compared.
    let now = Timestamp::now();
    let Some(mut lease) = api.get_opt(&config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                namespace: Some(config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.holder.clone()),
                lease_duration_seconds: Some(lease_seconds(config)),
                acquire_time: Some(MicroTime(now)),
                renew_time: Some(MicroTime(now)),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(Attempt::Acquired),
            Err(kube::Error::Api(s)) if s.code == 409 => Ok(Attempt::HeldByOther(
                "(just created by another replica)".into(),
            )),
            Err(e) => Err(e),
        };
    };
    let spec = lease.spec.clone().unwrap_or_default();
    let holder = spec.holder_identity.clone().unwrap_or_default();
    let ours = holder == config.holder;
    let duration = Duration::from_secs(
        u64::try_from(spec.lease_duration_seconds.unwrap_or(lease_seconds(config))).unwrap_or(0),
    );
    let version = lease.metadata.resource_version.clone().unwrap_or_default();
    let expired = observer.expired(&version, Instant::now(), duration);
    if !ours && !expired && !holder.is_empty() {
        return Ok(Attempt::HeldByOther(holder));
    }
    let transitions = spec.lease_transitions.unwrap_or(0) + i32::from(!ours);
    lease.spec = Some(LeaseSpec {
        holder_identity: Some(config.holder.clone()),
        lease_duration_seconds: Some(lease_seconds(config)),
        acquire_time: if ours {
            spec.acquire_time
        } else {
            Some(MicroTime(now))
        },
        renew_time: Some(MicroTime(now)),
        lease_transitions: Some(transitions),
        ..LeaseSpec::default()
    });
    match api
        .replace(&config.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => Ok(Attempt::Acquired),
        Err(kube::Error::Api(s)) if s.code == 409 => {
            Ok(Attempt::HeldByOther("(taken concurrently)".into()))
        }
        Err(e) => Err(e),
    }
}

/// Gives the Lease `name` up if `holder` still holds it, so another replica takes
/// it at once (on a clean shutdown; a failure only means it expires by itself).
pub(crate) async fn release(api: &Api<Lease>, name: &str, holder: &str) {
    let Ok(Some(mut lease)) = api.get_opt(name).await else {
        return;
    };
    let spec = lease.spec.get_or_insert_with(LeaseSpec::default);
    if spec.holder_identity.as_deref() != Some(holder) {
        return;
    }
    spec.holder_identity = None;
    if let Err(err) = api.replace(name, &PostParams::default(), &lease).await {
        tracing::warn!(%err, lease = %name, "could not release the lease; it expires by itself");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TERM: Duration = Duration::from_secs(15);

    #[test]
    fn a_lease_expires_only_after_a_term_of_local_time_without_change() {
        let start = Instant::now();
        let mut observer = LeaseObserver::default();
        // First sight: never expired, whatever renewTime says (the holder's clock
        // may be an hour behind ours; it is not read).
        assert!(!observer.expired("10", start, TERM));
        assert!(!observer.expired("10", start + TERM - Duration::from_millis(1), TERM));
        assert!(observer.expired("10", start + TERM, TERM));
    }

    #[test]
    fn a_renewal_starts_the_term_again() {
        let start = Instant::now();
        let mut observer = LeaseObserver::default();
        assert!(!observer.expired("10", start, TERM));
        // Renewed (a new version) just before the term ran out.
        let renewed = start + TERM - Duration::from_secs(1);
        assert!(!observer.expired("11", renewed, TERM));
        assert!(!observer.expired("11", start + TERM + Duration::from_secs(5), TERM));
        assert!(observer.expired("11", renewed + TERM, TERM));
    }
}

#[cfg(test)]
#[path = "leader_tests.rs"]
mod mock_tests;
