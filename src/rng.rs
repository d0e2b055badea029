//! rlx's one random number generator (SplitMix64): weight init and sampling in the local backend,
//! the seeded shuffle of problems, per-step sampling seeds, the bootstrap of `rlx compare`, fault
//! injection in `rlx serve`.
//!
//! Why our own: "same seed → same tokens" must hold across dependency upgrades and platforms;
//! `rand`'s `StdRng` explicitly does not promise a stable stream between versions. SplitMix64 is
//! a fixed, well-known function (Steele et al. 2014) and is more than random enough here.

/// SplitMix64 (Steele, Lea & Flood 2014).
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// A generator for stream `index` of `seed` (sample `i` of a request gets its own stream, so
    /// its tokens do not depend on how many samples run beside it).
    pub fn stream(seed: u64, index: u64) -> Self {
        let mut r = Self::new(seed ^ index.wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next_u64();
        r
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A uniform integer in `0..bound` (`bound` > 0), by Lemire's multiply-and-reject method, which
    /// has no modulo bias.
    pub fn below(&mut self, bound: u64) -> u64 {
        debug_assert!(bound > 0);
        let threshold = bound.wrapping_neg() % bound;
        loop {
            let m = u128::from(self.next_u64()) * u128::from(bound);
            if (m as u64) >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Uniform in [0, 1) with 53 random bits.
    pub fn uniform(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Standard normal (Box–Muller).
    pub fn normal(&mut self) -> f64 {
        let u1 = 1.0 - self.uniform(); // (0, 1]: log is finite
        let u2 = self.uniform();
        (-2.0 * u1.ln()).sqrt() * (2.0 * std::f64::consts::PI * u2).cos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streams_are_reproducible_and_distinct() {
        let a: Vec<u64> = (0..4).map(|_| SplitMix64::stream(7, 1).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(SplitMix64::stream(7, 1).next_u64(), SplitMix64::stream(7, 2).next_u64());
        let mut r = SplitMix64::new(3);
        let m: f64 = (0..20000).map(|_| r.normal()).sum::<f64>() / 20000.0;
        assert!(m.abs() < 0.05);
    }
}
