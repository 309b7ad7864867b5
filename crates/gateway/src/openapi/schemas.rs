//! The answers' schemas, derived from their types, and the request
//! bodies' (see [`bodies`]).

use serde_json::Value;
use utoipa::OpenApi;

use super::bodies;
use crate::{
    admin::answers::{info, jobs, limits, namespaces, queues, quotas, tokens},
    api::answers,
    history::Point,
};

#[derive(OpenApi)]
#[openapi(components(schemas(
    answers::ErrorBody<'_>,
    answers::Msg<'_>,
    answers::errors::NoJob,
    answers::errors::RateLimited<'_>,
    answers::errors::QuotaRefusalBody<'_>,
    answers::errors::QuotaName,
    answers::JobId,
    answers::Attributes,
    answers::Job<'_>,
    answers::DeliveredJob<'_>,
    answers::Published<'_>,
    answers::BulkPublished<'_>,
    answers::QueueSize<'_>,
    answers::Rate,
    answers::Stats<'_>,
    answers::JobQueueStats<'_>,
    answers::DeadLetterPeek<'_>,
    answers::Respawned,
    queues::AdminQueue<'_>,
    queues::QueueList<'_>,
    queues::MoveSummary<'_>,
    queues::MoveStateName,
    tokens::TokenScope,
    tokens::TokenView<'_>,
    tokens::CreatedToken<'_>,
    tokens::TokenList<'_>,
    tokens::Migrated,
    sundial_router::admin::records::Limit,
    limits::Limiter,
    limits::LimitEntry<'_>,
    limits::LimitList<'_>,
    queues::NamespaceList<'_>,
    queues::QueueHistory<'_>,
    Point,
    jobs::JobState,
    jobs::JobSummary,
    jobs::StateTime,
    jobs::QueueJob,
    jobs::QueueJobList<'_>,
    jobs::QueueJobFound<'_>,
    jobs::DeadJob,
    jobs::DeadJobList<'_>,
    jobs::DeadRespawned,
    jobs::DeadDeleted,
    sundial_router::quota::Quota,
    quotas::HeldQuota,
    quotas::BacklogBounds,
    quotas::QuotaAnswer<'_>,
    quotas::NamespaceUsage<'_>,
    quotas::UsageReport<'_>,
    namespaces::ImportResult<'_>,
    namespaces::NamespaceMove<'_>,
    namespaces::AttentionQueue<'_>,
    namespaces::Attention<'_>,
    crate::admin::portable::line::Line,
    sundial_router::Layout,
    sundial_router::drain::LayoutReport,
    sundial_router::drain::PoolReport,
    sundial_router::mover::MoverStatus,
    sundial_router::mover::MoverState,
    sundial_router::health::ShardHealth,
    info::PoolNames,
    info::Info,
    info::Drains,
    info::ShardError,
    info::PumpProcess,
    info::Pumps,
    info::ClusterPrimary,
    info::ShardKind,
    info::ShardStatus<'_>,
    info::PoolStatus<'_>,
    info::Version,
    info::Reloaded,
    info::Live,
    info::ReadyStatus,
    info::Ready,
    bodies::BulkBody,
    bodies::DeadPick,
    bodies::TokenForm,
    bodies::ScopeUpdate,
    bodies::QuotaPatch,
    bodies::OpenApiDocument,
)))]
struct Schemas;

/// `components.schemas`: every answer's schema by name.
pub(super) fn all() -> serde_json::Map<String, Value> {
    let doc = Schemas::openapi();
    let components = doc.components.expect("the schemas' components");
    match serde_json::to_value(components.schemas).expect("the schemas serialise") {
        Value::Object(map) => map,
        _ => unreachable!("a map serialises as an object"),
    }
}
