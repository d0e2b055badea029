//! The CPU kernels of rlx's embedded sampler ([`rlx::backend::local::decode`]): products of f32
//! activations with quantised weights, and the fused per-row kernels around them.
//!
//! - [`quant`]: weights in blocks of 32 values ([`QMatrix`]: Q8_0, and the 4-bit Q4_0/Q4_1 of
//!   GGUF files kept as they are stored), activations quantised per row to Q8 ([`Acts`]), and
//!   the product `x Wᵀ` split over output columns.
//! - [`isa`]: which instruction set the block dot products use, chosen once at run time
//!   (AVX-512 with VNNI, AVX2 with FMA, or portable Rust), overridable with `RLX_ISA`.
//! - [`team`]: the threads of a decoding group running alone, splitting its products and
//!   attention into parts they claim, and spinning between them rather than sleeping.
//! - [`rows`]: RMSNorm, rotary embeddings, SwiGLU, attention of one query over a cache, small
//!   f32 products (LoRA adapters), and a vectorisable `exp`.
//!
//! Every kernel has a test against a straightforward reference; the SIMD dot products are tested
//! against the portable loop at every instruction-set level the machine has.

pub mod isa;
pub mod quant;
pub mod rows;
pub mod team;

mod block;
mod dot;

pub use isa::Isa;
pub use quant::{Acts, GgmlType, QMatrix};
pub use team::Team;
