//! `x Wᵀ` that does not compute a gradient for a frozen `W`.
//!
//! candle's autograd computes the gradient of *both* matmul operands whenever the output needs
//! one (candle-core 0.11 `backprop.rs`, `Op::Matmul`): for a frozen base weight that is a full
//! `[out, in]` GEMM, a zero-filled buffer and an add per projection per backward pass, thrown
//! away. Under LoRA that is a third of the backward FLOPs plus the LM head's `[vocab, hidden]`
//! gradient. Wrapping the product in a custom op whose backward returns only `dL/dx = g W`
//! removes that work; when `W` is trainable (full fine-tuning) or nothing needs a gradient
//! (sampling) the plain matmul is used.

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

/// `x Wᵀ` for `x` `[n, in]`, `w` `[out, in]`; see the module docs.
///
/// # Errors
/// Tensor failures (shape mismatch).
pub(crate) fn frozen_aware_matmul_t(x: &Tensor, w: &Tensor) -> candle_core::Result<Tensor> {
    if x.track_op() && !w.track_op() {
        x.apply_op1_arc(std::sync::Arc::new(Box::new(FrozenMatmulT { w: w.clone() })))
    } else {
        x.matmul(&w.t()?)
    }
}

struct FrozenMatmulT {
    w: Tensor,
}

impl CustomOp1 for FrozenMatmulT {
    fn name(&self) -> &'static str {
        "frozen-matmul-t"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        // Rebuild the input as a tensor (one copy of the activations, small next to the GEMM)
        // and reuse candle's GEMM; the result has no autograd history of its own.
        let x = match layout.contiguous_offsets() {
            Some((start, end)) => {
                let dev = candle_core::Device::Cpu;
                match storage {
                    CpuStorage::F32(v) => Tensor::from_slice(&v[start..end], layout.shape(), &dev)?,
                    CpuStorage::F64(v) => Tensor::from_slice(&v[start..end], layout.shape(), &dev)?,
                    _ => candle_core::bail!("frozen-matmul-t: only f32 and f64 are supported"),
                }
            }
            None => candle_core::bail!("frozen-matmul-t: input must be contiguous"),
        };
        let y = x.matmul(&self.w.t()?)?;
        let shape = y.shape().clone();
        let (st, l) = y.storage_and_layout();
        let out = match (&*st, l.contiguous_offsets()) {
            (candle_core::Storage::Cpu(CpuStorage::F32(v)), Some((s, e))) => CpuStorage::F32(v[s..e].to_vec()),
            (candle_core::Storage::Cpu(CpuStorage::F64(v)), Some((s, e))) => CpuStorage::F64(v[s..e].to_vec()),
            _ => candle_core::bail!("frozen-matmul-t: unexpected output storage"),
        };
        Ok((out, shape))
    }

    fn bwd(&self, _x: &Tensor, _y: &Tensor, grad_y: &Tensor) -> candle_core::Result<Option<Tensor>> {
        // dL/dx = dL/dy · W: [n, out] x [out, in], both contiguous, no transpose materialised.
        Ok(Some(grad_y.contiguous()?.matmul(&self.w)?))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, Var};

    #[test]
    fn same_value_and_input_gradient_as_plain_matmul() {
        let dev = Device::Cpu;
        let w = Tensor::arange(0f32, 12.0, &dev).unwrap().reshape((4, 3)).unwrap();
        let x = Var::from_tensor(&(Tensor::arange(0f32, 6.0, &dev).unwrap().reshape((2, 3)).unwrap() * 0.1).unwrap()).unwrap();
        let y1 = frozen_aware_matmul_t(x.as_tensor(), &w).unwrap();
        let y2 = x.as_tensor().matmul(&w.t().unwrap()).unwrap();
        assert_eq!(y1.to_vec2::<f32>().unwrap(), y2.to_vec2::<f32>().unwrap());
        let g1 = y1.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        let g2 = y2.sqr().unwrap().sum_all().unwrap().backward().unwrap();
        assert_eq!(g1.get(x.as_tensor()).unwrap().to_vec2::<f32>().unwrap(), g2.get(x.as_tensor()).unwrap().to_vec2::<f32>().unwrap());
    }
}
