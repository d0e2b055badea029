//! LoRA adapters (Hu et al. 2021): `y = x Wᵀ + (α/r) · x Aᵀ Bᵀ` with the base `W` frozen.
//!
//! Names and initialisation follow PEFT so adapters can be exported and compared: `lora_A`
//! `[r, in]` is Kaiming-uniform (bound `1/√in`, PEFT's `kaiming_uniform_(a=√5)`), `lora_B`
//! `[out, r]` starts at zero, so a fresh adapter leaves the model unchanged (and `lora_A` gets
//! no gradient until `lora_B` moves away from zero).

use candle_core::{DType, Device, Tensor, Var};

use crate::rng::SplitMix64 as Rng;
use crate::backend::error::Result;

pub use crate::seam::LoraConfig;

/// One adapter.
#[derive(Debug, Clone)]
pub struct Lora {
    a: Tensor,
    b: Tensor,
    vars: Option<(Var, Var)>,
    scale: f64,
}

impl Lora {
    /// A new trainable adapter for a projection `in_dim → out_dim`.
    ///
    /// # Errors
    /// Tensor failures.
    pub fn init(in_dim: usize, out_dim: usize, cfg: &LoraConfig, dtype: DType, rng: &mut Rng) -> Result<Self> {
        let bound = 1.0 / (in_dim as f64).sqrt();
        let a: Vec<f64> = (0..cfg.rank * in_dim).map(|_| (2.0 * rng.uniform() - 1.0) * bound).collect();
        let a = Var::from_tensor(&Tensor::from_vec(a, (cfg.rank, in_dim), &Device::Cpu)?.to_dtype(dtype)?)?;
        let b = Var::zeros((out_dim, cfg.rank), dtype, &Device::Cpu)?;
        Ok(Self { a: a.as_tensor().clone(), b: b.as_tensor().clone(), vars: Some((a, b)), scale: cfg.scale() })
    }

    /// A trainable adapter starting from existing tensors (copied).
    ///
    /// # Errors
    /// Tensor failures.
    pub fn trainable_from(a: &Tensor, b: &Tensor, cfg: &LoraConfig) -> Result<Self> {
        let (va, vb) = (Var::from_tensor(&a.copy()?)?, Var::from_tensor(&b.copy()?)?);
        Ok(Self { a: va.as_tensor().clone(), b: vb.as_tensor().clone(), vars: Some((va, vb)), scale: cfg.scale() })
    }

    /// A frozen adapter (sampling from a snapshot).
    pub fn frozen(a: Tensor, b: Tensor, scale: f64) -> Self {
        Self { a, b, vars: None, scale }
    }

    /// The trainable `(A, B)`, if this adapter is trainable.
    pub fn vars(&self) -> Option<(Var, Var)> {
        self.vars.clone()
    }

    /// `A` `[r, in]`.
    pub fn a(&self) -> &Tensor {
        &self.a
    }

    /// `B` `[out, r]`.
    pub fn b(&self) -> &Tensor {
        &self.b
    }

    /// `α / r`.
    pub fn scale(&self) -> f64 {
        self.scale
    }

    /// `(α/r) · x Aᵀ Bᵀ` for `x` `[n, in]`.
    ///
    /// # Errors
    /// Tensor failures.
    pub fn forward(&self, x: &Tensor) -> candle_core::Result<Tensor> {
        x.matmul(&self.a.t()?)?.matmul(&self.b.t()?)? * self.scale
    }

    /// `(α/r) · B A`, the update to the base weight `[out, in]`.
    ///
    /// # Errors
    /// Tensor failures.
    pub fn delta(&self) -> candle_core::Result<Tensor> {
        self.b.matmul(&self.a)? * self.scale
    }
}
