//! Consistent hashing of a pool's slots over its shards, in the manner of
//! ketama (and pingora-ketama): each shard puts `POINTS_PER_WEIGHT × weight`
//! points on a 64-bit continuum; a slot goes to the shard owning the first
//! point at or after the slot's hash, wrapping around.
//!
//! - A shard's points depend only on its *name* and weight, never on its
//!   address or its position in the list, so moving a shard to another
//!   address moves no slot.
//! - Adding a shard to n moves about 1/(n+1) of the slots, all of them to
//!   the new shard; removing one moves only that shard's slots.
//! - Hashes are XXH3-64 (a specified, stable algorithm) of
//!   `"<shard name>#<i>"` for points and `"slot/<slot>"` for slots. `tests`
//!   pin golden vectors: this mapping must never change silently, or jobs
//!   already stored would be looked for on the wrong shard.

use xxhash_rust::xxh3::xxh3_64;

/// Points per unit of weight. Ketama's 160 left a shard's share of the
/// continuum up to 20% off its weight (measured over pools of 2 to 8
/// shards); 1024 keeps it within about 4-8%, at a cost of 16 KiB and a
/// 14-step binary search per lookup for a pool of 8 shards.
pub const POINTS_PER_WEIGHT: u32 = 1024;

/// The continuum of one pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ring {
    /// (point, shard index), sorted by point.
    points: Vec<(u64, usize)>,
    shards: usize,
}

impl Ring {
    /// Builds the ring of shards given as (name, weight), in config order;
    /// lookups return indexes into that list. A weight of 0 gives a shard no
    /// slots.
    pub fn new<'a>(shards: impl IntoIterator<Item = (&'a str, u32)>) -> Self {
        let mut points = Vec::new();
        let mut n = 0;
        for (idx, (name, weight)) in shards.into_iter().enumerate() {
            n += 1;
            for i in 0..POINTS_PER_WEIGHT * weight {
                points.push((xxh3_64(format!("{name}#{i}").as_bytes()), idx));
            }
        }
        // Ties (astronomically rare) break by shard index, so the order is total.
        points.sort_unstable();
        Self { points, shards: n }
    }

    /// The shard (index) that holds `slot`, or `None` when no shard has
    /// weight.
    pub fn shard_of(&self, slot: u32) -> Option<usize> {
        if self.points.is_empty() {
            return None;
        }
        let h = xxh3_64(format!("slot/{slot}").as_bytes());
        let i = self.points.partition_point(|(p, _)| *p < h);
        Some(self.points[i % self.points.len()].1)
    }

    /// How many shards the ring was built from.
    pub fn shards(&self) -> usize {
        self.shards
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn ring(names: &[&str]) -> Ring {
        Ring::new(names.iter().map(|n| (*n, 1)))
    }

    /// Golden vectors: the slot → shard map of a fixed pool. If this test
    /// fails, the ring changed, and every deployed pool would look for its
    /// jobs on the wrong shards.
    #[test]
    fn mapping_is_pinned() {
        let r = ring(&["a", "b", "c"]);
        let got: Vec<usize> = (0..16).map(|s| r.shard_of(s).expect("shard")).collect();
        assert_eq!(got, GOLDEN_ABC);
        let w = Ring::new([("a", 1), ("b", 3)]);
        let got: Vec<usize> = (0..16).map(|s| w.shard_of(s).expect("shard")).collect();
        assert_eq!(got, GOLDEN_A1_B3);
        assert_eq!(xxh3_64(b"a#0"), GOLDEN_POINT_A0);
    }

    // Computed with an independent implementation (Python's xxhash package).
    const GOLDEN_ABC: [usize; 16] = [0, 2, 1, 0, 1, 1, 2, 0, 2, 1, 0, 1, 2, 0, 0, 0];
    const GOLDEN_A1_B3: [usize; 16] = [0, 1, 1, 0, 1, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 0];
    const GOLDEN_POINT_A0: u64 = 7_826_595_479_700_043_870;

    #[test]
    fn addresses_and_order_do_not_matter_only_names() {
        let r1 = ring(&["a", "b", "c"]);
        let r2 = ring(&["c", "a", "b"]);
        let names1 = ["a", "b", "c"];
        let names2 = ["c", "a", "b"];
        for slot in 0..256 {
            let s1 = names1[r1.shard_of(slot).expect("shard")];
            let s2 = names2[r2.shard_of(slot).expect("shard")];
            assert_eq!(s1, s2);
        }
    }

    #[test]
    fn no_weight_no_shard() {
        assert_eq!(Ring::new([("a", 0)]).shard_of(0), None);
        let r = Ring::new([("a", 0), ("b", 1)]);
        assert!((0..64).all(|s| r.shard_of(s) == Some(1)));
    }

    /// Each shard's share of `slots` slots, for the spread properties.
    fn share(r: &Ring, slots: u32) -> Vec<f64> {
        let mut counts = vec![0u32; r.shards()];
        for s in 0..slots {
            counts[r.shard_of(s).expect("shard")] += 1;
        }
        let total = f64::from(counts.iter().sum::<u32>());
        counts.into_iter().map(|c| f64::from(c) / total).collect()
    }

    #[test]
    fn shares_follow_weights() {
        let even = share(&ring(&["a", "b", "c", "d"]), 16_384);
        for s in &even {
            assert!((s - 0.25).abs() < 0.025, "{even:?}");
        }
        let weighted = share(&Ring::new([("a", 1), ("b", 3)]), 16_384);
        assert!((weighted[1] - 0.75).abs() < 0.03, "{weighted:?}");
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(24))]

        /// Adding one shard to n moves about 1/(n+1) of the slots, and only
        /// to the new shard.
        #[test]
        fn adding_a_shard_moves_about_its_share(n in 1usize..8) {
            let names: Vec<String> = (0..=n).map(|i| format!("shard-{i}")).collect();
            let before = Ring::new(names[..n].iter().map(|s| (s.as_str(), 1)));
            let after = Ring::new(names.iter().map(|s| (s.as_str(), 1)));
            let (mut moved, mut total) = (0u32, 0u32);
            for slot in 0..4_800 {
                let (x, y) = (before.shard_of(slot), after.shard_of(slot));
                total += 1;
                if x != y {
                    moved += 1;
                    prop_assert_eq!(y, Some(n), "a moved slot goes to the new shard");
                }
            }
            let frac = f64::from(moved) / f64::from(total);
            let want = 1.0 / (n as f64 + 1.0);
            prop_assert!((frac - want).abs() < want * 0.25 + 0.01, "moved {frac}, expected about {want}");
        }

        /// Removing one shard moves only the slots it held.
        #[test]
        fn removing_a_shard_moves_only_its_slots(n in 2usize..8, gone in 0usize..8) {
            let gone = gone % n;
            let names: Vec<String> = (0..n).map(|i| format!("shard-{i}")).collect();
            let before = Ring::new(names.iter().map(|s| (s.as_str(), 1)));
            let kept: Vec<&String> = names.iter().enumerate().filter(|(i, _)| *i != gone).map(|(_, s)| s).collect();
            let after = Ring::new(kept.iter().map(|s| (s.as_str(), 1)));
            for slot in 0..1_600 {
                let x = before.shard_of(slot).expect("shard");
                let y = kept[after.shard_of(slot).expect("shard")];
                if x != gone {
                    prop_assert_eq!(&names[x], y, "a slot of a kept shard stays");
                }
            }
        }
    }
}
