//! Push delivery's control-plane parts (issue 34, being built): how a
//! push request is signed ([`signing`]).

pub mod signing;
