//! Group commit: operations on one queue in one slot that arrive while a
//! call for that queue runs are made together by the next call, so under
//! load one script call (and its `EVALSHA`, its `TIME`, its counter writes
//! and its `PUBLISH`) serves many requests. Publishes go this way, and so
//! do a queue's acks and consumes, together in one line (`Workers`).
//!
//! No timer is involved: the first operation on an idle queue is sent at
//! once, and what queues up behind a running call goes in the next one, so
//! a batch is as large as the load makes it and a lone request waits for
//! nothing. Once [`Op::SECOND_CALL_AT`] operations wait, a second call
//! takes them beside the first (never more than two at once), so the line
//! does not idle while the gateway answers a finished call. Two calls run
//! on different pooled connections, so operations whose requests
//! overlapped may reach Redis in either order, as they may from two
//! gateways. Each operation stays all or nothing on its own: a publication
//! that fails (an id that exists) changes nothing for the others in its
//! batch, and an ack finds its job or not on its own. The calls run in a
//! task of their own, so a request that goes away does not take its
//! batch's other requests with it; what a call made for a request that went
//! away is the operation's to undo (jobs reserved for a consumer that left
//! are released when their answer is dropped, see `Reserved`).
//!
//! `lines.rs` holds the machinery, generic over the operation ([`Op`]):
//! each queue's line and the calls that serve it; `publishes.rs` and
//! `workers.rs` the two operations.

mod lines;
mod publishes;
mod turns;
mod workers;

pub use lines::{Lines, Op};
pub use publishes::{PublishOp, Publishes};
pub use turns::{Turn, Turns};
pub use workers::{Done, Reserved, Work, WorkOp, Workers};
