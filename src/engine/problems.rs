//! The run's problems: training problems in a seeded order, cycled with a cursor; evaluation
//! problems in file order.

use crate::data::{self, Problem};
use crate::spec::types::{DataFormat, Source};

use super::Error;

/// Loads and concatenates sources, applying `ids` and `limit`.
///
/// # Errors
/// Unreadable files, rows that fit no format, remote sources (not supported by this loader).
pub fn load(sources: &[Source]) -> Result<Vec<Problem>, Error> {
    let mut out = vec![];
    for s in sources {
        if s.path.starts_with("hf://") {
            return Err(Error::Setup(format!("dataset `{}`: hf:// sources are not supported by the engine yet; download the split to a local file", s.path)));
        }
        let format = match s.format {
            DataFormat::Auto => None,
            DataFormat::Lcb | DataFormat::Lcbv5 => Some(data::Format::Lcb),
            DataFormat::Taco => Some(data::Format::Taco),
            DataFormat::Primeintellect => Some(data::Format::PrimeIntellect),
            DataFormat::Codeforces => Some(data::Format::Codeforces),
            DataFormat::Mbpp => Some(data::Format::Mbpp),
            DataFormat::Humaneval => Some(data::Format::HumanEval),
        };
        let mut problems = data::load_file(std::path::Path::new(&s.path), format).map_err(|e| Error::Setup(format!("{e}")))?;
        if !s.ids.is_empty() {
            problems.retain(|p| s.ids.contains(&p.id));
        }
        if let Some(limit) = s.limit {
            problems.truncate(limit as usize);
        }
        out.extend(problems);
    }
    Ok(out)
}

/// SplitMix64: a tiny, fixed, platform-independent generator, so a seed gives the same order on
/// every machine and every rlx version (a crate's stream may change between releases).
pub fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9E37_79B9_7F4A_7C15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Fisher–Yates shuffle with [`splitmix64`].
pub fn shuffle<T>(items: &mut [T], seed: u64) {
    let mut s = seed;
    for i in (1..items.len()).rev() {
        let j = (splitmix64(&mut s) % (i as u64 + 1)) as usize;
        items.swap(i, j);
    }
}

/// A sampling seed for (run seed, step, slot), distinct across steps and problems.
pub fn derive_seed(seed: u64, step: i64, slot: u64) -> u64 {
    let mut s = seed ^ (step as u64).wrapping_mul(0xA24B_AED4_963E_E407) ^ slot.wrapping_mul(0x9FB2_1C65_1E98_DF25);
    splitmix64(&mut s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shuffle_is_a_fixed_permutation() {
        let mut v: Vec<u32> = (0..10).collect();
        shuffle(&mut v, 42);
        let mut w: Vec<u32> = (0..10).collect();
        shuffle(&mut w, 42);
        assert_eq!(v, w);
        let mut sorted = v.clone();
        sorted.sort();
        assert_eq!(sorted, (0..10).collect::<Vec<_>>());
        let mut x: Vec<u32> = (0..10).collect();
        shuffle(&mut x, 43);
        assert_ne!(v, x);
        assert_ne!(derive_seed(0, 1, 0), derive_seed(0, 1, 1));
        assert_ne!(derive_seed(0, 1, 0), derive_seed(0, 2, 0));
    }
}
