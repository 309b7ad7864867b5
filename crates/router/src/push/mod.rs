//! Push delivery's control-plane parts (issue 34, being built): how a
//! push request is signed ([`signing`]), and which addresses a push may
//! reach ([`networks`]).

pub mod networks;
pub mod signing;
