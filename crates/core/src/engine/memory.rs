//! A shard's memory, as Redis reports it (`INFO memory`): what it uses and
//! its `maxmemory`, for the headroom kept for tenants that hold little of
//! a shard (`sundial_router::headroom`).

use fred::prelude::*;

use crate::{EngineError, Shard, keys};

/// Used memory and `maxmemory`, in bytes (`max` 0: no `maxmemory`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Memory {
    pub used: u64,
    pub max: u64,
}

impl Memory {
    /// `used` as a share of `max`; `None` without a `maxmemory`.
    pub fn fill(&self) -> Option<f64> {
        (self.max > 0).then(|| self.used as f64 / self.max as f64)
    }

    fn of(info: &str) -> Memory {
        let field = |name: &str| super::checks::info_field(info, name).parse().unwrap_or(0);
        Memory {
            used: field("used_memory"),
            max: field("maxmemory"),
        }
    }
}

impl Shard {
    /// The shard's memory. On a cluster, the primary fullest for its
    /// `maxmemory` (a write fails on the node of its hash slot), or any
    /// when none has one.
    pub async fn memory(&self) -> Result<Memory, EngineError> {
        if !self.is_cluster() {
            let info: String = self
                .conn()
                .idempotent(keys::META, |c| async move {
                    c.info(Some(fred::types::InfoKind::Memory)).await
                })
                .await?;
            return Ok(Memory::of(&info));
        }
        let mut worst: Option<Memory> = None;
        self.conn()
            .each_primary_info(|_, info| {
                let m = Memory::of(info);
                let fuller = match (m.fill(), worst.and_then(|w| w.fill())) {
                    (Some(a), Some(b)) => a > b,
                    (Some(_), None) => true,
                    (None, _) => worst.is_none(),
                };
                if fuller {
                    worst = Some(m);
                }
                Ok(())
            })
            .await?;
        Ok(worst.unwrap_or_default())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_read_from_info() {
        let info = "# Memory\r\nused_memory:1000\r\nused_memory_human:1000B\r\nmaxmemory:4000\r\nmaxmemory_human:4K\r\n";
        let m = Memory::of(info);
        assert_eq!(
            m,
            Memory {
                used: 1000,
                max: 4000
            }
        );
        assert_eq!(m.fill(), Some(0.25));
        assert_eq!(Memory::of("used_memory:5\r\nmaxmemory:0\r\n").fill(), None);
    }
}
