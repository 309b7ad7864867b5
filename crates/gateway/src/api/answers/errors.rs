//! The answers of refusals and errors, on both listeners.

use serde::Serialize;
use utoipa::ToSchema;

/// Every error of both listeners, except the empty consume and the rate
/// limit (see `Msg`). Internal causes are logged, never returned.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = Error, example = json!({"error": "invalid token"}))]
// No other field: a client tells it from `QuotaRefusal` by its fields.
#[serde(deny_unknown_fields)]
pub struct ErrorBody<'a> {
    pub error: &'a str,
}

/// lmstfy's `msg` shape: the empty consume (404 `no job available`), the
/// rate limit (429), and success messages such as `published`,
/// `respawned`, `success`, `reloaded`.
#[derive(Debug, Serialize, ToSchema)]
#[schema(example = json!({"msg": "no job available"}))]
pub struct Msg<'a> {
    pub msg: &'a str,
}

/// `msg` of an empty consume.
#[derive(Debug, Serialize, ToSchema)]
pub enum NoJobMsg {
    #[serde(rename = "no job available")]
    NoJobAvailable,
}

/// 404 of a consume that got no job within `timeout` (or whose long poll
/// ended with the gateway's shutdown).
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NoJob {
    #[schema(inline)]
    pub msg: NoJobMsg,
}

/// 429: the token is over its rate limit (lmstfy's shape and text).
/// Nothing was done.
#[derive(Debug, Serialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct RateLimited<'a> {
    #[schema(
        pattern = r"^token\(.*\) (consume|produce) reach the limit rate, please retry later$",
        example = "token(01HZX...) produce reach the limit rate, please retry later"
    )]
    pub msg: &'a str,
}

/// A request refused by a namespace quota: nothing of it was done.
/// `usage` is what met the limit: the job's value (body bytes, delay, TTL
/// or tries), for a rate the jobs drawn ahead of it, for a backlog the
/// jobs or bytes the namespace holds (an estimate never under the truth),
/// for `max_queues` the queues it uses. `memory_share` is not a quota but
/// the headroom of a shard near its `maxmemory`: `limit` is the
/// namespace's share of the shard, `usage` what it holds there.
#[derive(Debug, Serialize, ToSchema)]
#[schema(as = QuotaRefusal)]
#[serde(deny_unknown_fields)]
pub struct QuotaRefusalBody<'a> {
    #[schema(example = "a body of 11 bytes is over the namespace's quota max_body of 10 bytes")]
    pub error: &'a str,
    #[schema(value_type = QuotaName)]
    pub quota: &'a str,
    #[schema(minimum = 1)]
    pub limit: u64,
    pub usage: u64,
}

/// The name a refusal gives a shard's headroom near its `maxmemory`.
pub const MEMORY_SHARE: &str = "memory_share";

/// What a quota refusal names: a bound that refuses (every bound but
/// `weight`, which only shares), or `memory_share`.
#[derive(Debug)]
pub struct QuotaName;

impl utoipa::PartialSchema for QuotaName {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use sundial_router::quota::Bound;
        let names = std::iter::once(MEMORY_SHARE).chain(
            Bound::ALL
                .into_iter()
                .filter(|b| *b != Bound::Weight)
                .map(Bound::name),
        );
        super::names_schema("The quota that refused, or `memory_share`.", names)
    }
}

impl ToSchema for QuotaName {}
