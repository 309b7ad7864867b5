//! Schemas that no answer type gives: request bodies that handlers read
//! by hand (lmstfy's lenient forms, arrays kept as raw text, patches that
//! tell "absent" from `null`), the unions of answers that one status can
//! carry, and this document's own outline.

use std::borrow::Cow;

use serde_json::json;
use utoipa::{
    PartialSchema, ToSchema,
    openapi::{
        Ref, RefOr,
        schema::{ArrayBuilder, ObjectBuilder, OneOfBuilder, Schema, Type},
    },
};

/// A schema written as JSON: an object's (utoipa reads those whole).
fn from_json(value: serde_json::Value) -> RefOr<Schema> {
    serde_json::from_value(value).expect("a schema written in bodies.rs")
}

fn reference(name: &str) -> RefOr<Schema> {
    RefOr::Ref(Ref::from_schema_name(name))
}

/// Named schemas, written as JSON, each its own component.
macro_rules! written {
    ($($(#[$doc:meta])* $name:ident = $json:tt;)*) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                from_json(json!($json))
            }
        }

        impl ToSchema for $name {
            fn name() -> Cow<'static, str> {
                Cow::Borrowed(stringify!($name))
            }
        }
    )*};
}

written! {
    /// The body of the admin dead-letter respawn and delete.
    DeadPick = {
        "type": "object",
        "description": "Which dead jobs: `ids` (1 to 1,000) or `all: true` (optionally bounded by `limit`), never both nor neither. Unknown fields are refused (400).",
        "properties": {
            "ids": {
                "type": "array",
                "items": {
                    "$ref": "#/components/schemas/JobId"
                },
                "maxItems": 1000,
                "default": []
            },
            "all": {
                "type": "boolean",
                "default": false
            },
            "limit": {
                "type": "integer",
                "minimum": 1,
                "maximum": 18446744073709551615u64,
                "description": "With `all`: at most this many (the rest stays for the next call). 0 is 400 `invalid limit`. With `ids`: 400 `limit goes with all, not with ids`."
            },
            "ttl": {
                "type": "integer",
                "minimum": 0,
                "maximum": 4294967295u64,
                "description": "Respawn only: the respawned jobs' TTL in seconds (default `limits.default_ttl`, 86400; 0 = never expires). A delete with a `ttl` is 400 `a delete takes no ttl`."
            }
        },
        "additionalProperties": false,
        "examples": [
            {
                "ids": [
                    "01JD3M6Y7ZQ8K5X4W2V1T0S9R8"
                ]
            },
            {
                "all": true,
                "limit": 100,
                "ttl": 3600
            }
        ]
    };
    /// The form fields of `POST /token/{ns}`.
    TokenForm = {
        "type": "object",
        "description": "Fields of `POST /token/{ns}` given as a form body; they override the query's. Decoded as Go's `ParseForm` (`+` and `%20` are spaces, a raw space or trailing newline is kept).",
        "properties": {
            "description": {
                "type": "string"
            },
            "token": {
                "type": "string"
            },
            "pool": {
                "type": "string"
            },
            "scope": {
                "type": "string",
                "x-sundial-extension": true
            },
            "queues": {
                "type": "string",
                "x-sundial-extension": true
            }
        }
    };
    /// The body of `PUT /token/{ns}/{token}/scope`.
    ScopeUpdate = {
        "type": "object",
        "required": [
            "scopes"
        ],
        "properties": {
            "scopes": {
                "type": "array",
                "items": {
                    "$ref": "#/components/schemas/TokenScope"
                },
                "minItems": 1
            },
            "queues": {
                "type": [
                    "array",
                    "null"
                ],
                "items": {
                    "type": "string"
                },
                "minItems": 1,
                "maxItems": 100,
                "description": "Queue names and `prefix*` prefixes; left out or `null`: every queue. An empty list, a blank name or a name with a comma is 400."
            }
        },
        "additionalProperties": false,
        "example": {
            "scopes": [
                "publish",
                "read"
            ],
            "queues": [
                "emails",
                "reports-*"
            ]
        },
        "x-sundial-extension": true
    };
    /// The body of `PATCH /namespaces/{ns}/quota`: absent and `null` differ.
    QuotaPatch = {
        "type": "object",
        "description": "Quota fields to change: each a whole number from 0 up (0 lifts a bound a lower level sets), or null (the namespace no longer sets it). Fields left out stay as they are.",
        "additionalProperties": false,
        "properties": {
            "max_jobs": {
                "type": [
                    "integer",
                    "null"
                ],
                "minimum": 0,
                "maximum": 9007199254740992u64,
                "description": "Jobs held in every state, the backlog (429 `max_jobs` over it, nothing stored; a bulk all or nothing)."
            },
            "max_bytes": {
                "type": [
                    "integer",
                    "null"
                ],
                "minimum": 0,
                "maximum": 9007199254740992u64,
                "description": "Bytes held by those jobs: each job's id and stored record, attributes and body included (429 `max_bytes` over it)."
            },
            "max_queues": {
                "type": [
                    "integer",
                    "null"
                ],
                "minimum": 0,
                "maximum": 9007199254740992u64,
                "description": "Queues the namespace uses: holds jobs in, or published to since the last sweep of its index (403 `max_queues` for a publish to a new queue over it)."
            },
            "max_schedules": {
                "type": [
                    "integer",
                    "null"
                ],
                "minimum": 0,
                "maximum": 9007199254740992u64,
                "description": "Schedules the namespace may hold (403 `max_schedules` for a new one over it); 1,000 when no level sets it."
            },
            "publish_rate": {
                "type": [
                    "integer",
                    "null"
                ],
                "minimum": 0,
                "description": "Jobs published per second, a bulk counting each job (429 over it)."
            },
            "consume_rate": {
                "type": [
                    "integer",
                    "null"
                ],
                "minimum": 0,
                "description": "Jobs consumed per second (a consume gets at most what the bucket holds; 429 when it holds none)."
            },
            "max_body": {
                "type": [
                    "integer",
                    "null"
                ],
                "minimum": 0,
                "description": "Bytes of one job's body (413 over it)."
            },
            "max_delay": {
                "type": [
                    "integer",
                    "null"
                ],
                "minimum": 0,
                "description": "Seconds of one job's delay (400 over it; a delay left to the default is lowered to it).",
                "maximum": 4294967295u64
            },
            "max_ttl": {
                "type": [
                    "integer",
                    "null"
                ],
                "minimum": 0,
                "description": "Seconds of one job's TTL, 0 (never expires) counting as longer than any (400 over it; a TTL left to the default is lowered to it).",
                "maximum": 4294967295u64
            },
            "max_tries": {
                "type": [
                    "integer",
                    "null"
                ],
                "minimum": 0,
                "description": "Tries of one job (400 over it; tries left to the default are lowered to it).",
                "maximum": 65535
            },
            "weight": {
                "type": [
                    "integer",
                    "null"
                ],
                "minimum": 0,
                "description": "Not a bound: the namespace's share of a busy Redis server's calls against other namespaces' (a gateway's publishes, consumes and acks on one server go in turn by weight once they are more than its pooled connections), and of a nearly full shard's memory (headroom splits it by weight). 0 or unset: 1.",
                "maximum": 1000
            }
        }
    };
    /// This document, in outline.
    OpenApiDocument = {
        "type": "object",
        "description": "This document.",
        "required": [
            "openapi",
            "info",
            "paths"
        ],
        "properties": {
            "openapi": {
                "type": "string",
                "enum": [
                    "3.1.0"
                ]
            }
        }
    };
}

/// The body of `PUT /api/{ns}/{queue}/bulk`: each element's raw JSON text
/// is one job's body.
#[derive(Debug)]
pub struct BulkBody;

impl PartialSchema for BulkBody {
    fn schema() -> RefOr<Schema> {
        let element = ObjectBuilder::new().description(Some(
            "Any JSON value; its text, as sent, is one job's body.",
        ));
        ArrayBuilder::new()
            .description(Some(
                "At most 64 elements; each element's raw JSON text (as sent, a string \
                 keeping its quotes) is one job's body, at most 1 MiB each. Any JSON value \
                 is accepted as an element.",
            ))
            .items(element)
            .min_items(Some(1))
            .max_items(Some(64))
            .examples([json!([{"to": "a@example.com"}, "plain text", 42])])
            .into()
    }
}

impl ToSchema for BulkBody {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("BulkBody")
    }
}

/// Inline schemas: the body of a publish, and the unions of answers.
macro_rules! inline {
    ($($(#[$doc:meta])* $name:ident => $schema:expr;)*) => {$(
        $(#[$doc])*
        #[derive(Debug)]
        pub struct $name;

        impl PartialSchema for $name {
            fn schema() -> RefOr<Schema> {
                $schema
            }
        }

        impl ToSchema for $name {}
    )*};
}

inline! {
    /// A job's bytes, stored as sent.
    JobBytes => ObjectBuilder::new()
        .schema_type(Type::String)
        .content_media_type("application/octet-stream")
        .into();
    /// A refusal: a plain error, or a quota's.
    ErrorOrQuota => OneOfBuilder::new()
        .item(reference("Error"))
        .item(reference("QuotaRefusal"))
        .into();
    /// 404 of a consume: nothing came, or the pool is unknown.
    NoJobOrError => OneOfBuilder::new()
        .item(reference("NoJob"))
        .item(reference("Error"))
        .into();
    /// What a consume delivers: one job (`count` = 1), else an array.
    Delivered => OneOfBuilder::new()
        .item(reference("DeliveredJob"))
        .item(
            ArrayBuilder::new()
                .items(reference("DeliveredJob"))
                .min_items(Some(1))
                .max_items(Some(100)),
        )
        .into();
}
