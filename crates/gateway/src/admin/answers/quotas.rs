//! Quotas and usage: what a namespace is held to, and what it holds.

use std::collections::BTreeMap;

use serde::Serialize;
use sundial_router::quota::{Bound, Quota};
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        RefOr, Type,
        schema::{ObjectBuilder, Schema, SchemaType},
    },
};

/// Some bounds by name, each a number or `null` where there is none.
#[derive(Debug)]
pub struct Bounds(pub Vec<(Bound, Option<u64>)>);

impl Bounds {
    /// `bounds` of `quota`.
    pub fn of(quota: &Quota, bounds: &[Bound]) -> Self {
        Self(bounds.iter().map(|&b| (b, quota.limit(b))).collect())
    }
}

impl Serialize for Bounds {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(b, v)| (b.name(), v)))
    }
}

/// The schema of [`Bounds`] of `bounds`, every one listed.
fn bounds_schema(description: &str, bounds: &[Bound]) -> RefOr<Schema> {
    let mut object = ObjectBuilder::new()
        .schema_type(Type::Object)
        .description(Some(description));
    for b in bounds {
        let value =
            ObjectBuilder::new().schema_type(SchemaType::from_iter([Type::Integer, Type::Null]));
        object = object.property(b.name(), value).required(b.name());
    }
    object.into()
}

/// Every bound a namespace is held to.
#[derive(Debug)]
pub struct HeldQuota;

impl PartialSchema for HeldQuota {
    fn schema() -> RefOr<Schema> {
        bounds_schema(
            "What the namespace is held to: every bound, `null` where there is none \
             (`weight`: `null` is 1).",
            &Bound::ALL,
        )
    }
}

impl ToSchema for HeldQuota {}

/// A namespace's backlog bounds.
#[derive(Debug)]
pub struct BacklogBounds;

/// The bounds of a namespace's backlog, which its usage shows.
pub const BACKLOG: [Bound; 3] = [Bound::MaxJobs, Bound::MaxBytes, Bound::MaxQueues];

impl PartialSchema for BacklogBounds {
    fn schema() -> RefOr<Schema> {
        bounds_schema("Its backlog bounds (`null`: none).", &BACKLOG)
    }
}

impl ToSchema for BacklogBounds {}

/// The answer of every quota route.
#[derive(Debug, Serialize, ToSchema)]
pub struct QuotaAnswer<'a> {
    pub pool: &'a str,
    pub namespace: &'a str,
    #[schema(value_type = HeldQuota)]
    pub quota: Bounds,
    /// What the namespace sets itself (the quota table).
    pub set: Quota,
    /// The config's quota (`[quotas]` under the pool's `quotas`) of the
    /// pool the namespace's jobs are written to: its tokens' pool, or the
    /// pool it moved to.
    pub pool_quota: Quota,
}

/// What a namespace holds in a pool and what it did there.
#[derive(Debug, Serialize, ToSchema)]
pub struct NamespaceUsage<'a> {
    /// On `GET /namespaces/{ns}/usage` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pool: Option<&'a str>,
    pub namespace: &'a str,
    /// Jobs held now, in every state (the slots' usage counts; a job the
    /// mover copies counts at both ends until its copy is safe).
    pub jobs: u64,
    /// Bytes those jobs hold: ids and stored records, attributes and
    /// bodies included (Redis's own overhead per key and entry is not in
    /// it).
    pub bytes: u64,
    /// Queues it uses: its queue index (queues that hold jobs, or were
    /// published to since the last sweep, every ten minutes).
    pub queues: u64,
    /// Jobs published, ever (running totals of its queues, which move with
    /// their slots).
    pub published: u64,
    /// Deliveries to consumers, ever.
    pub consumed: u64,
    /// Jobs acknowledged (deleted by id), ever.
    pub acked: u64,
    /// Requests refused by its quota, per quota name, ever (counted by
    /// every gateway, added to the admin Redis within a second).
    pub refused: BTreeMap<String, u64>,
    #[schema(value_type = BacklogBounds)]
    pub limits: Bounds,
}

/// Every namespace's usage in a pool.
#[derive(Debug, Serialize, ToSchema)]
pub struct UsageReport<'a> {
    pub pool: &'a str,
    /// Every namespace with a token in the pool or jobs in it, by name.
    pub namespaces: Vec<NamespaceUsage<'a>>,
}
