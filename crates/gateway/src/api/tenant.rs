//! Who is asking, for which namespace, in which pool; and what the request
//! names: the path is read once, here, for every job-API handler. The
//! token's scope is enforced here too, from the route and method, so that
//! no handler can forget it.

use std::sync::Arc;

use axum::{
    extract::{FromRequestParts, MatchedPath, RawPathParams},
    http::{Method, request::Parts},
};
use sundial_core::Shard;
use sundial_core::job::check_namespace;
use sundial_router::{
    Pool, Scope, Token,
    admin::tokens::{Access, Check},
    placement::{self, NamespacePools, Unplaced},
};

use super::{error::ApiError, params::Params};
use crate::state::AppState;

/// An authenticated caller and what its request names.
#[derive(Debug)]
pub struct Tenant {
    pub ns: String,
    /// The pools that may hold the namespace's jobs: where they are written
    /// (the token's pool, or the pool its namespace moved or moves to) and,
    /// while it moves between pools, the other one, which reads (by id,
    /// queue-wide, consumes, long polls) cover too
    /// (`sundial_router::placement`).
    pub pools: NamespacePools,
    pub token: Token,
    /// What the token may do, as found when the request arrived.
    pub access: Arc<Access>,
    /// The scopes this request needs.
    pub needs: &'static [Scope],
    /// The `{queue}` segment as sent (consume names several, comma-separated);
    /// each handler checks it.
    pub queue: String,
    /// The `{job_id}` segment, on job routes.
    pub job_id: Option<String>,
    /// The query string.
    pub params: Params,
}

/// The path's segments, as the route captured them (percent-decoded).
#[derive(Debug, Default)]
struct Segments {
    ns: String,
    queue: String,
    job_id: Option<String>,
}

impl Segments {
    async fn read(parts: &mut Parts, state: &Arc<AppState>) -> Result<Self, ApiError> {
        let raw = RawPathParams::from_request_parts(parts, state)
            .await
            .map_err(|_| ApiError::NotFound("api not found"))?;
        let mut out = Self::default();
        for (name, value) in &raw {
            match name {
                "ns" => value.clone_into(&mut out.ns),
                "queue" => value.clone_into(&mut out.queue),
                "job_id" => out.job_id = Some(value.to_owned()),
                _ => {}
            }
        }
        Ok(out)
    }
}

/// The token as sent: the `X-Token` header, else the `token` query
/// parameter, unless the gateway refuses tokens in URLs (`http.query_token`).
fn presented_token(
    parts: &Parts,
    params: &Params,
    query_token: bool,
) -> Result<Option<String>, ApiError> {
    if let Some(v) = parts.headers.get("x-token") {
        return Ok(v.to_str().ok().map(str::to_owned).filter(|s| !s.is_empty()));
    }
    let in_query = params.get("token").filter(|s| !s.is_empty());
    if in_query.is_some() && !query_token {
        return Err(ApiError::Unauthorized(
            "this gateway refuses a token in the URL (http.query_token = false): send it in the X-Token header",
        ));
    }
    Ok(in_query.map(|s| s.into_owned()))
}

impl FromRequestParts<Arc<AppState>> for Tenant {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &Arc<AppState>,
    ) -> Result<Self, ApiError> {
        let Segments { ns, queue, job_id } = Segments::read(parts, state).await?;
        check_namespace(&ns).map_err(|e| ApiError::bad(e.to_string()))?;
        let params = Params::new(&parts.uri);
        let Some(raw) = presented_token(parts, &params, state.query_token)? else {
            return Err(ApiError::Unauthorized("token not found"));
        };
        let token = Token::parse(&raw);
        let home = state.admin.homes().get(&token.pool, &ns);
        let needs = needs(&parts.method, matched(parts));
        let check = state.admin.tokens().check(&token, &ns);
        let pools = match NamespacePools::resolve(
            &state.live.topology(),
            &token.pool,
            home.as_ref(),
        ) {
            Ok(pools) => pools,
            // Its jobs may be in a pool this gateway's config lacks: an ack
            // or peek here would miss them. Said only to a token that may
            // make this request.
            Err(Unplaced::Missing(missing)) => {
                let access = valid(check)?;
                permits(&access, needs, &queue)?;
                return Err(ApiError::Unserved(format!(
                    "namespace {ns} is moving to another pool, and this gateway's config lacks pool {missing}: retry later"
                )));
            }
            Err(Unplaced::NoPool) => return Err(ApiError::NotFound("pool not found")),
        };
        let access = valid(check)?;
        permits(&access, needs, &queue)?;
        Ok(Self {
            ns,
            pools,
            token,
            access,
            needs,
            queue,
            job_id,
            params,
        })
    }
}

/// The token's access, or why it has none.
fn valid(check: Check) -> Result<Arc<Access>, ApiError> {
    match check {
        Check::Valid(access) => Ok(access),
        Check::Invalid => Err(ApiError::Unauthorized("invalid token")),
        Check::Unknown => Err(ApiError::tokens_not_loaded()),
    }
}

/// The route the request matched (empty when none).
fn matched(parts: &Parts) -> &str {
    parts
        .extensions
        .get::<MatchedPath>()
        .map_or("", MatchedPath::as_str)
}

impl Tenant {
    /// The pool the namespace's jobs are written to.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pools.writes
    }

    /// The pools that may hold the namespace's jobs: where it writes, then
    /// the other one while it moves.
    pub fn pools(&self) -> impl Iterator<Item = &Arc<Pool>> {
        self.pools.pools()
    }

    /// Where the namespace's requests go now, by this gateway's copy of the
    /// homes table: (the pool written to, the other pool read while it
    /// moves). A long poll compares it with the request's.
    pub fn route_now(&self, state: &AppState) -> (String, Option<String>) {
        let home = state.admin.homes().get(&self.token.pool, &self.ns);
        placement::route_names(&state.live.topology(), &self.token.pool, home.as_ref())
    }

    /// The request's route, as [`Self::route_now`] gives it.
    pub fn route(&self) -> (String, Option<String>) {
        (
            self.pool().name().to_owned(),
            self.pools.also.as_ref().map(|p| p.name().to_owned()),
        )
    }

    /// The pool a write goes to now, re-read after a publish's body (the
    /// topology may have been reloaded, or the namespace's move gone on).
    /// A namespace whose writes went to another pool meanwhile gets 503,
    /// nothing stored: its job ids were made for the other pool's lanes.
    pub fn write_pool(&self, state: &AppState) -> Result<Arc<Pool>, ApiError> {
        let home = state.admin.homes().get(&self.token.pool, &self.ns);
        let (name, _) = placement::route(&self.token.pool, home.as_ref());
        if name != self.pool().name() {
            return Err(ApiError::Busy);
        }
        state
            .current_pool(name)
            .ok_or(ApiError::NotFound("pool not found"))
    }

    /// Every (shard, slot) that may hold the job `id` of `queue`, in the
    /// order to look, with a second look (see `sundial_router::placement`).
    pub fn job_places(&self, queue: &str, id: &sundial_core::JobId) -> Vec<(&Shard, u32)> {
        self.pools.job_places(&self.ns, queue, id)
    }

    /// Every (shard, slot) that may hold jobs of `queue`, in both pools
    /// while the namespace moves.
    pub fn queue_places(&self, queue: &str) -> Vec<(&Shard, u32)> {
        self.pools.queue_places(&self.ns, queue)
    }

    /// Whether the token still holds what this request needs, by this
    /// gateway's copy of the table now: a long poll asks again each time it
    /// wakes, so a token revoked or narrowed meanwhile takes no job.
    pub fn still_permitted(&self, state: &AppState) -> Result<(), ApiError> {
        match state.admin.tokens().check(&self.token, &self.ns) {
            Check::Valid(access) => permits(&access, self.needs, &self.queue),
            Check::Invalid => Err(ApiError::Unauthorized("invalid token")),
            // The table was loaded once, so it cannot be unknown again.
            Check::Unknown => Ok(()),
        }
    }
}

/// The scopes a job-API route needs. A route not named here needs
/// `manage`, the narrowest grant's last resort, so that a route added
/// without thought is closed to scoped tokens rather than open.
fn needs(method: &Method, route: &str) -> &'static [Scope] {
    const PUBLISH: &[Scope] = &[Scope::Publish];
    const CONSUME: &[Scope] = &[Scope::Consume];
    const READ: &[Scope] = &[Scope::Read];
    const MANAGE: &[Scope] = &[Scope::Manage];
    let read = *method == Method::GET || *method == Method::HEAD;
    match route {
        "/api/{ns}/{queue}" if read => CONSUME,
        "/api/{ns}/{queue}" | "/api/{ns}/{queue}/bulk" if *method == Method::PUT => PUBLISH,
        // Republish acknowledges a job and publishes its replacement.
        "/api/{ns}/{queue}/job/{job_id}" if *method == Method::PUT => {
            &[Scope::Publish, Scope::Consume]
        }
        "/api/{ns}/{queue}/job/{job_id}" if *method == Method::DELETE => CONSUME,
        "/api/{ns}/{queue}/job/{job_id}/touch" | "/api/{ns}/{queue}/job/{job_id}/release"
            if *method == Method::POST =>
        {
            CONSUME
        }
        "/api/{ns}/{queue}/job/{job_id}"
        | "/api/{ns}/{queue}/peek"
        | "/api/{ns}/{queue}/size"
        | "/api/{ns}/{queue}/stats"
        | "/api/{ns}/{queue}/deadletter"
        | "/api/{ns}/{queue}/deadletter/size"
        | "/api/{ns}/{queue}/schedules"
        | "/api/{ns}/{queue}/schedules/{name}"
            if read =>
        {
            READ
        }
        _ => MANAGE,
    }
}

/// 403 unless `access` holds every scope in `needs` on every queue that
/// `queue` names (consume names several, comma-separated).
fn permits(access: &Access, needs: &[Scope], queue: &str) -> Result<(), ApiError> {
    if let Some(missing) = needs.iter().find(|s| !access.grant.allows(**s)) {
        return Err(ApiError::Forbidden(format!(
            "the token's scope does not allow {missing}"
        )));
    }
    if let Some(q) = queue.split(',').find(|q| !access.grant.allows_queue(q)) {
        return Err(ApiError::Forbidden(format!(
            "the token's scope does not cover queue {q:?}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_job_route_needs_the_scope_its_action_implies() {
        let (get, put, del) = (Method::GET, Method::PUT, Method::DELETE);
        let cases: &[(&Method, &str, &[Scope])] = &[
            (&put, "/api/{ns}/{queue}", &[Scope::Publish]),
            (&put, "/api/{ns}/{queue}/bulk", &[Scope::Publish]),
            (&get, "/api/{ns}/{queue}", &[Scope::Consume]),
            (&del, "/api/{ns}/{queue}/job/{job_id}", &[Scope::Consume]),
            (
                &Method::POST,
                "/api/{ns}/{queue}/job/{job_id}/touch",
                &[Scope::Consume],
            ),
            (
                &Method::POST,
                "/api/{ns}/{queue}/job/{job_id}/release",
                &[Scope::Consume],
            ),
            (
                &put,
                "/api/{ns}/{queue}/job/{job_id}",
                &[Scope::Publish, Scope::Consume],
            ),
            (&get, "/api/{ns}/{queue}/job/{job_id}", &[Scope::Read]),
            (&get, "/api/{ns}/{queue}/peek", &[Scope::Read]),
            (&get, "/api/{ns}/{queue}/size", &[Scope::Read]),
            (&get, "/api/{ns}/{queue}/stats", &[Scope::Read]),
            (&get, "/api/{ns}/{queue}/deadletter", &[Scope::Read]),
            (&get, "/api/{ns}/{queue}/deadletter/size", &[Scope::Read]),
            (&del, "/api/{ns}/{queue}", &[Scope::Manage]),
            (&put, "/api/{ns}/{queue}/deadletter", &[Scope::Manage]),
            (&del, "/api/{ns}/{queue}/deadletter", &[Scope::Manage]),
            (&get, "/api/{ns}/{queue}/something-new", &[Scope::Manage]),
            (&get, "/api/{ns}/{queue}/schedules", &[Scope::Read]),
            (&get, "/api/{ns}/{queue}/schedules/{name}", &[Scope::Read]),
            (&put, "/api/{ns}/{queue}/schedules/{name}", &[Scope::Manage]),
            (&del, "/api/{ns}/{queue}/schedules/{name}", &[Scope::Manage]),
            (
                &Method::POST,
                "/api/{ns}/{queue}/schedules/{name}/pause",
                &[Scope::Manage],
            ),
        ];
        for (method, route, want) in cases {
            assert_eq!(needs(method, route), *want, "{method} {route}");
        }
    }
}
