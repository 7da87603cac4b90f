//! Leader election through a coordination.k8s.io Lease, so several operator
//! replicas are safe: one reconciles, the others wait to take over. The
//! timing follows client-go's leaderelection package:
//!
//! - the leader renews every retry period and gives up (exits, to restart as
//!   a standby) when no renewal got through within the renew deadline, which
//!   is shorter than the lease, so it stops before a standby may take over;
//! - a standby never compares the lease's `renewTime`, written by another
//!   host's clock, with its own clock: it notes when it saw the lease record
//!   change and takes the lease once the record stood still for a whole
//!   lease duration on its own monotonic clock (see [`Observed`]);
//! - a leader that shuts down releases the lease (empty holder), so a
//!   standby takes over at once instead of after the lease runs out.

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, PostParams};
use kube::Client;
use std::sync::Mutex;
use std::time::Duration;
use tokio::time::Instant;

pub struct LeaderElection {
    api: Api<Lease>,
    name: String,
    identity: String,
    timing: Timing,
    observed: Mutex<Option<Observed>>,
}

/// client-go's three durations, in its default proportions (15 s lease,
/// 10 s renew deadline, 2 s retry period).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Timing {
    pub lease: Duration,
    pub renew_deadline: Duration,
    pub retry_period: Duration,
}

impl Timing {
    pub fn for_lease(lease: Duration) -> Timing {
        Timing {
            lease,
            renew_deadline: lease * 2 / 3,
            retry_period: (lease * 2 / 15).max(Duration::from_millis(200)),
        }
    }
}

/// The lease record as last seen, and when (on this replica's clock).
#[derive(Clone, Debug, PartialEq)]
pub struct Observed {
    record: LeaseSpec,
    at: Instant,
}

impl Observed {
    /// Note `record` as seen at `now`: the time moves only when the record
    /// changed, which is what another holder's renewal looks like.
    pub fn note(previous: Option<Observed>, record: LeaseSpec, now: Instant) -> Observed {
        match previous {
            Some(p) if p.record == record => p,
            _ => Observed { record, at: now },
        }
    }

    /// Whether a replica other than `identity` may take the lease at `now`:
    /// it is free (released or never held), or its record has not changed
    /// for the lease's whole duration.
    pub fn free_for(&self, identity: &str, now: Instant) -> bool {
        let holder = self.record.holder_identity.as_deref().unwrap_or("");
        if holder.is_empty() || holder == identity {
            return true;
        }
        let secs = self.record.lease_duration_seconds.unwrap_or(0).max(0) as u64;
        now.duration_since(self.at) >= Duration::from_secs(secs)
    }
}

impl LeaderElection {
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, lease: Duration) -> Self {
        LeaderElection {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            timing: Timing::for_lease(lease),
            observed: Mutex::new(None),
        }
    }

    /// Wait until this replica holds the lease.
    pub async fn acquire(&self) {
        let mut waiting_logged = false;
        loop {
            match self.try_acquire().await {
                Ok(true) => {
                    tracing::info!(identity = %self.identity, "became the leader");
                    return;
                }
                Ok(false) if !waiting_logged => {
                    tracing::info!(identity = %self.identity, "another replica leads; standing by");
                    waiting_logged = true;
                }
                Ok(false) => {}
                Err(e) => tracing::warn!(error = %e, "leader election"),
            }
            tokio::time::sleep(self.timing.retry_period).await;
        }
    }

    /// Renew every retry period; returns when leadership is lost: renewal
    /// refused, or none got through within the renew deadline.
    pub async fn hold(&self) {
        let mut last_renewed = Instant::now();
        loop {
            tokio::time::sleep(self.timing.retry_period).await;
            let attempt = tokio::time::timeout(self.timing.retry_period, self.try_acquire()).await;
            match attempt {
                Ok(Ok(true)) => last_renewed = Instant::now(),
                Ok(Ok(false)) => return,
                Ok(Err(e)) => tracing::warn!(error = %e, "could not renew the leader lease"),
                Err(_) => tracing::warn!("renewing the leader lease timed out"),
            }
            if last_renewed.elapsed() >= self.timing.renew_deadline {
                return;
            }
        }
    }

    /// Give the lease up (on shutdown), so a standby need not wait for it to
    /// run out. Only if it is still ours.
    pub async fn release(&self) {
        let released = async {
            let mut lease = self.api.get(&self.name).await?;
            let spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.identity.as_str()) {
                return Ok::<bool, kube::Error>(false);
            }
            let now = MicroTime(Timestamp::now());
            lease.spec = Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                ..spec
            });
            self.api
                .replace(&self.name, &PostParams::default(), &lease)
                .await?;
            Ok(true)
        };
        match tokio::time::timeout(self.timing.retry_period, released).await {
            Ok(Ok(true)) => tracing::info!(identity = %self.identity, "released the leader lease"),
            Ok(Ok(false)) => {}
            Ok(Err(e)) => tracing::warn!(error = %e, "could not release the leader lease"),
            Err(_) => tracing::warn!("releasing the leader lease timed out"),
        }
    }

    /// Take or renew the lease if it is ours, free or expired.
    async fn try_acquire(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let Some(mut lease) = self.api.get_opt(&self.name).await? else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.name.clone()),
                    ..ObjectMeta::default()
                },
                spec: Some(self.spec(now, now, 0)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
                Err(e) => Err(e),
            };
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let observed = {
            let mut slot = self.observed.lock().expect("lock");
            let seen = Observed::note(slot.take(), spec.clone(), Instant::now());
            *slot = Some(seen.clone());
            seen
        };
        if !observed.free_for(&self.identity, Instant::now()) {
            return Ok(false);
        }
        let ours = spec.holder_identity.as_deref() == Some(self.identity.as_str());
        let transitions = spec.lease_transitions.unwrap_or(0) + if ours { 0 } else { 1 };
        let acquired = if ours {
            spec.acquire_time.map(|t| t.0).unwrap_or(now)
        } else {
            now
        };
        lease.spec = Some(self.spec(acquired, now, transitions));
        // The resourceVersion makes this a compare-and-swap: of two replicas
        // taking an expired lease, one gets a conflict.
        match self.api.replace(&self.name, &PostParams::default(), &lease).await {
            Ok(_) => Ok(true),
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(false),
            Err(e) => Err(e),
        }
    }

    fn spec(&self, acquired: Timestamp, renewed: Timestamp, transitions: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.identity.clone()),
            lease_duration_seconds: Some(self.timing.lease.as_secs() as i32),
            acquire_time: Some(MicroTime(acquired)),
            renew_time: Some(MicroTime(renewed)),
            lease_transitions: Some(transitions),
            ..LeaseSpec::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str, renewed: Timestamp) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(15),
            renew_time: Some(MicroTime(renewed)),
            ..LeaseSpec::default()
        }
    }

    #[test]
    fn the_renew_deadline_ends_before_the_lease_runs_out() {
        for secs in [1, 3, 15, 60] {
            let t = Timing::for_lease(Duration::from_secs(secs));
            assert!(
                t.retry_period < t.renew_deadline && t.renew_deadline < t.lease,
                "{t:?}"
            );
        }
        let t = Timing::for_lease(Duration::from_secs(15));
        assert_eq!(
            (t.renew_deadline, t.retry_period),
            (Duration::from_secs(10), Duration::from_secs(2))
        );
    }

    #[test]
    fn expiry_is_judged_on_the_local_clock_from_when_the_record_changed() {
        let start = Instant::now();
        // renewTime an hour behind, as a holder with a slow clock writes it:
        // still held while the record keeps changing.
        let hour = k8s_openapi::jiff::SignedDuration::from_hours(1);
        let past = Timestamp::now() - hour;
        let mut seen = Observed::note(None, held_by("other", past), start);
        for s in 1..=30 {
            let now = start + Duration::from_secs(s);
            let renewed = past + k8s_openapi::jiff::SignedDuration::from_secs(s as i64);
            seen = Observed::note(Some(seen), held_by("other", renewed), now);
            assert!(!seen.free_for("me", now), "taken at {s} s while renewed");
        }
        // The record stands still: free a whole lease later, not before.
        let last = start + Duration::from_secs(30);
        assert!(!seen.free_for("me", last + Duration::from_secs(14)));
        assert!(seen.free_for("me", last + Duration::from_secs(15)));
        // renewTime an hour ahead and never renewed: free after one lease.
        let future = Timestamp::now() + hour;
        let seen = Observed::note(None, held_by("other", future), start);
        assert!(!seen.free_for("me", start + Duration::from_secs(10)));
        assert!(seen.free_for("me", start + Duration::from_secs(15)));
    }

    #[test]
    fn a_released_lease_or_our_own_is_free_at_once() {
        let now = Instant::now();
        let released = LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            ..LeaseSpec::default()
        };
        assert!(Observed::note(None, released, now).free_for("me", now));
        let ours = held_by("me", Timestamp::now());
        assert!(Observed::note(None, ours, now).free_for("me", now));
    }
}
