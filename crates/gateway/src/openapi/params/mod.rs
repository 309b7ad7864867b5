//! The query and header parameters of the operations, written as JSON
//! (the handlers read them by hand, leniently, as lmstfy does, so no type
//! holds them), one type per operation or shared group, in [`jobs`] and
//! `admin`. `super::layers` gives each `{name}` of a route's path its
//! shared definition from `shared.json`; an operation lists a path
//! parameter here only where it says more (a consume's queue list, a
//! token's namespace that is not checked as a name).

/// Parameters written as JSON, one type per operation or shared group.
macro_rules! written {
    ($($(#[$doc:meta])* $name:ident = [$($json:tt),* $(,)?];)*) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name;

        impl utoipa::IntoParams for $name {
            fn into_params(
                _: impl Fn() -> Option<utoipa::openapi::path::ParameterIn>,
            ) -> Vec<utoipa::openapi::path::Parameter> {
                vec![$(
                    serde_json::from_value(serde_json::json!($json))
                        .expect("a parameter written in params")
                ),*]
            }
        }
    )*};
}

mod admin;
mod jobs;

pub use admin::*;
pub use jobs::*;
