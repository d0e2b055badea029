//! Problem slots: the training problems in run order are numbered from 0 (cycling through the
//! set), each step consumes slots, and the data cursor is the first slot not consumed. Sampling
//! seeds: each (run seed, step, problem slot) gets its own, so a resumed step samples what it
//! would have sampled and no two problems share a stream. Loading, filtering and the seeded
//! train order are `data::load_data`'s.

use std::collections::BTreeSet;

use crate::rng::SplitMix64;

/// A sampling seed for (run seed, step, slot), distinct across steps and problems.
pub fn derive_seed(seed: u64, step: i64, slot: u64) -> u64 {
    SplitMix64::new(seed ^ (step as u64).wrapping_mul(0xA24B_AED4_963E_E407) ^ slot.wrapping_mul(0x9FB2_1C65_1E98_DF25)).next_u64()
}

/// The data cursor (the first problem slot from `base` not consumed) and the slots consumed
/// beyond it.
pub(crate) fn cursor_of(base: u64, consumed: &BTreeSet<u64>) -> (u64, Vec<u64>) {
    let mut cursor = base;
    while consumed.contains(&cursor) {
        cursor += 1;
    }
    (cursor, consumed.range(cursor..).copied().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeds_differ_by_step_and_slot() {
        assert_ne!(derive_seed(0, 1, 0), derive_seed(0, 1, 1));
        assert_ne!(derive_seed(0, 1, 0), derive_seed(0, 2, 0));
        assert_ne!(derive_seed(0, -1, 0), derive_seed(1, -1, 0));
        assert_eq!(derive_seed(5, 3, 2), derive_seed(5, 3, 2));
    }
}
