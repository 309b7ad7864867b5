//! The shared responses that operations name (`response = …` in their
//! `#[utoipa::path]`): each is a `$ref` to the response of that name in
//! `shared.json`, where it is written once. The ones that every operation
//! behind a layer can answer, [`super::layers`] adds.

use utoipa::{
    ToResponse,
    openapi::{Ref, RefOr, response::Response},
};

macro_rules! shared {
    ($($(#[$doc:meta])* $name:ident,)*) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name;

        impl<'r> ToResponse<'r> for $name {
            fn response() -> (&'r str, RefOr<Response>) {
                let name = stringify!($name);
                (name, RefOr::Ref(Ref::from_response_name(name)))
            }
        }
    )*};
}

shared! {
    /// 400, the generic refusal of a name or parameter.
    BadRequest,
    /// 403: the token lacks the scope.
    Forbidden,
    /// 403 of a publish: the scope, or the quota `max_queues`.
    PublishForbidden,
    /// 403 of a schedule's `PUT`: the scope, or the quota `max_schedules`.
    ScheduleForbidden,
    /// 404: the pool or the thing asked for.
    NotFound,
    /// 408: the body came too slowly.
    RequestTimeout,
    /// 429: a rate limit or quota.
    TooManyRequests,
    /// 413: the body is too large.
    PayloadTooLarge,
    /// 500: a bug or an unexpected Redis answer.
    Internal,
    /// 503: Redis is out of reach.
    Unavailable,
}
