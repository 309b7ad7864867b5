//! Schedules, as the pumps keep them: the book of which schedules each
//! slot should hold, made from this process's copy of the schedule table
//! ([`book`]), each held slot made to hold its page, schedules that moved
//! taken over with their state ([`holding`]), and its due fires fired and
//! planned ahead ([`firing`]), held to their namespaces' quotas
//! ([`quotas`], each call's room in [`rooms`]); what a slot's loop knows of its schedules is in
//! [`keeper`]. A slot's loop (`crate::slot`) does all of it while it
//! holds the slot's lease; the scripts fence every write.

pub(crate) mod book;
pub(crate) mod firing;
pub(crate) mod holding;
pub(crate) mod keeper;
pub(crate) mod quotas;
pub(crate) mod rooms;

pub(crate) use book::Book;
pub(crate) use keeper::{Fenced, SlotSchedules};
