//! Tenants kept apart: what one namespace can do to a shared pool, and what
//! it cannot do to the others. Quotas, a pool's Redis at its `maxmemory`,
//! and the bound on the work one consume can cause. One file per kind of
//! scenario.

mod backlog;
mod consume;
mod fair_share;
mod masters;
mod memory;
mod quotas;
mod series;
mod usage;
