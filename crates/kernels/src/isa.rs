//! The instruction set of the block dot products, detected once per process.
//!
//! `RLX_ISA=scalar|avx2|avx512` caps it (a level the CPU lacks falls back to the best it has):
//! benchmarks compare the levels on one machine, and a user can rule the SIMD kernels out.

use std::sync::OnceLock;

/// The environment variable that caps the level (rlx lists it with its other switches).
pub const SWITCH: &str = "RLX_ISA";

/// A level of SIMD support, in increasing order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Isa {
    /// Portable Rust (any CPU).
    Scalar,
    /// x86-64 AVX2 with FMA and F16C: 32 int8 products per `vpmaddubsw`.
    Avx2,
    /// x86-64 AVX-512 F/BW/VL with VNNI: 64 int8 products summed into int32 per `vpdpbusd`.
    Avx512,
}

impl Isa {
    /// The name `RLX_ISA` takes.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Avx2 => "avx2",
            Isa::Avx512 => "avx512",
        }
    }

    /// Every level this CPU can run, lowest first (tests compare each against the portable one).
    pub fn available() -> Vec<Isa> {
        let best = detected();
        [Isa::Scalar, Isa::Avx2, Isa::Avx512].into_iter().filter(|&l| l <= best).collect()
    }
}

/// The level the kernels use: the best the CPU has, capped by `RLX_ISA`.
pub fn current() -> Isa {
    static LEVEL: OnceLock<Isa> = OnceLock::new();
    *LEVEL.get_or_init(|| {
        let cap = match std::env::var(SWITCH).ok().as_deref() {
            Some("scalar") => Isa::Scalar,
            Some("avx2") => Isa::Avx2,
            _ => Isa::Avx512,
        };
        detected().min(cap)
    })
}

fn detected() -> Isa {
    #[cfg(target_arch = "x86_64")]
    {
        // F16C (widening GGUF's f16 scales) comes with every AVX2 CPU; required all the same.
        let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c");
        if avx2 && is_x86_feature_detected!("avx512f") && is_x86_feature_detected!("avx512bw") && is_x86_feature_detected!("avx512vl") && is_x86_feature_detected!("avx512vnni") {
            return Isa::Avx512;
        }
        if avx2 {
            return Isa::Avx2;
        }
    }
    Isa::Scalar
}
