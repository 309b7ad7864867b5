//! A namespace's publish and consume rates (`publish_rate`,
//! `consume_rate`), counted in the admin Redis so that they hold across
//! gateways.
//!
//! A rate is a bucket on the admin Redis's clock (`lua/quota_rate.lua`): a
//! second's worth of jobs at once, then one job per `1/rate` s. A publish
//! takes all its jobs or none (a bulk counts each of its jobs) and gives
//! them back if it fails; a consume takes what the bucket holds, up to its
//! `count`, and gives back what it did not get.
//!
//! A gateway takes jobs from the bucket ahead of its requests, a lease of
//! a fiftieth of a second's worth at a time ([`LEASE_SHARE`]), and serves
//! its requests from the lease: a namespace at its rate costs the admin
//! Redis about 50 calls a second per gateway, not one per request (one per
//! publish made a namespace held to half a shard's capacity cost that
//! Redis more than its jobs did). Every job published or consumed was
//! still taken from the bucket, so the bound holds exactly; what a lease
//! holds unused is given back at the gateway's next take from that bucket
//! once it is [`LEASE_FOR`] old. As with token limits, a request is let
//! through when the admin Redis cannot count (and a warning logged), and
//! so are the namespace's requests on this gateway for [`FAILING_FOR`]
//! after: a quota protects the other tenants, it should not take the
//! service down.

use std::{
    collections::HashMap,
    sync::{Arc, LazyLock, Mutex},
    time::{Duration, Instant},
};

use axum::http::StatusCode;
use sundial_core::{RateGrant, RateTake, Shard, keys};
use sundial_router::quota::{Bound, Quota};

use super::{error::ApiError, quota::refusal, tenant::Tenant};
use crate::state::AppState;

/// A lease is this fraction of a second's jobs (at least what a request
/// asks).
const LEASE_SHARE: u64 = 50;
/// Jobs of a lease unused after this long go back to the bucket.
const LEASE_FOR: Duration = Duration::from_millis(100);

/// Jobs taken from the bucket and not handed out yet.
#[derive(Debug, Default)]
struct Lease {
    left: u64,
    since: Option<Instant>,
    /// Until when requests are let through without asking the admin
    /// Redis, which failed to answer: a namespace's requests on this
    /// gateway do not each wait out its timeout in turn.
    failing_until: Option<Instant>,
}

/// How long requests are let through after the admin Redis failed to count.
const FAILING_FOR: Duration = Duration::from_secs(1);

type Leases = Mutex<HashMap<String, Arc<tokio::sync::Mutex<Lease>>>>;
/// Per bucket, this gateway's lease.
static LEASES: LazyLock<Leases> = LazyLock::new(Leases::default);

fn lease_of(bucket: &str) -> Arc<tokio::sync::Mutex<Lease>> {
    let mut all = LEASES.lock().unwrap_or_else(|p| p.into_inner());
    all.entry(bucket.to_owned()).or_default().clone()
}

/// Jobs taken from a rate, to give back what was not used.
#[derive(Debug)]
pub(super) struct Taken {
    bucket: String,
    pub(super) jobs: u64,
}

impl Taken {
    /// Gives back `jobs` of them (a publish that failed, a consume that got
    /// fewer), to this gateway's lease.
    pub(super) async fn give_back(&self, jobs: u64) {
        if jobs > 0 {
            lease_of(&self.bucket).lock().await.left += jobs;
        }
    }
}

/// Gives back every job of `taken` when the write it was taken for
/// failed (nothing, or not known to be, stored).
pub(super) async fn give_back_if_failed<T, E>(taken: Option<&Taken>, result: &Result<T, E>) {
    if let (Err(_), Some(t)) = (result, taken) {
        t.give_back(t.jobs).await;
    }
}

/// Takes `jobs` from one of the namespace's rates: the publish rate all
/// or none, the consume rate up to `jobs` (429 when the bucket lacks
/// them). `None`: no rate of that kind to count against.
pub(super) async fn take_rate(
    state: &AppState,
    tenant: &Tenant,
    quota: &Quota,
    bound: Bound,
    jobs: u64,
) -> Result<Option<Taken>, ApiError> {
    let Some(rate) = quota.limit(bound) else {
        return Ok(None);
    };
    // Boxed: the admin Redis call's state would otherwise be part of every
    // request's future, rate or not, and be copied with it (measured: about
    // 5 µs of gateway CPU a publish).
    Box::pin(take(state, tenant, bound, rate, jobs)).await
}

async fn take(
    state: &AppState,
    tenant: &Tenant,
    bound: Bound,
    rate: u64,
    jobs: u64,
) -> Result<Option<Taken>, ApiError> {
    let all = bound == Bound::PublishRate;
    let direction = if all { 'p' } else { 'c' };
    let bucket = keys::quota_rate(&tenant.token.pool, &tenant.ns, direction);
    let redis = state.admin.redis();
    let lease = lease_of(&bucket);
    let mut lease = lease.lock().await;
    if lease.failing_until.is_some_and(|t| Instant::now() < t) {
        return Ok(None);
    }
    if lease.since.is_some_and(|t| t.elapsed() > LEASE_FOR) && lease.left > 0 {
        let unused = std::mem::take(&mut lease.left);
        if let Err(e) = redis
            .admin()
            .quota_rate(&bucket, rate, unused, RateTake::Refund)
            .await
        {
            tracing::debug!(error = %e, "cannot give back a rate quota's unused lease");
        }
    }
    // A publish needs all its jobs; a consume takes what the lease holds,
    // and asks the bucket only when it holds none.
    if lease.left < jobs && (all || lease.left == 0) {
        let need = jobs - lease.left;
        let chunk = need.max(rate / LEASE_SHARE);
        let grant = match ask(&redis, &bucket, rate, chunk, need, all).await {
            Ok(g) => g,
            Err(e) => {
                tracing::warn!(error = %e, "cannot count against a rate quota; letting requests through for a second");
                lease.failing_until = Some(Instant::now() + FAILING_FOR);
                return Ok(None);
            }
        };
        if grant.granted == 0 {
            return Err(refused(tenant, bound, rate, jobs, &grant));
        }
        lease.left += grant.granted;
        lease.since = Some(Instant::now());
    }
    let got = lease.left.min(jobs);
    lease.left -= got;
    Ok(Some(Taken { bucket, jobs: got }))
}

/// Takes a lease of `chunk` jobs from the bucket, or, for a publish
/// (`all`) when the bucket holds fewer, exactly the `need`ed jobs.
async fn ask(
    redis: &Shard,
    bucket: &str,
    rate: u64,
    chunk: u64,
    need: u64,
    all: bool,
) -> Result<RateGrant, sundial_core::EngineError> {
    let admin = redis.admin();
    if !all {
        return admin.quota_rate(bucket, rate, chunk, RateTake::Some).await;
    }
    let grant = admin.quota_rate(bucket, rate, chunk, RateTake::All).await?;
    if grant.granted > 0 || chunk == need {
        return Ok(grant);
    }
    admin.quota_rate(bucket, rate, need, RateTake::All).await
}

fn refused(tenant: &Tenant, bound: Bound, rate: u64, jobs: u64, grant: &RateGrant) -> ApiError {
    let verb = &bound.name()[..bound.name().len() - "_rate".len()];
    let mut r = refusal(
        tenant,
        StatusCode::TOO_MANY_REQUESTS,
        bound.name(),
        rate,
        grant.drawn,
        format!(
            "{jobs} job(s) to {verb} would go over the namespace's quota {} of {rate} jobs/s: \
             retry in {} ms",
            bound.name(),
            grant.retry_after_ms
        ),
    );
    r.retry_after_ms = Some(grant.retry_after_ms.max(1));
    ApiError::Quota(Box::new(r))
}
