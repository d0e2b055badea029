//! `log_softmax(logits)[target]` per row as one op with a hand-written backward.
//!
//! The composed version (`log_softmax` then `gather`) materialises about five `[tokens, vocab]`
//! tensors forward and as many backward; with SmolLM2's 49 152-token vocabulary and 512 tokens
//! that is ~100 MB each, and memory traffic dominates. Here the forward makes one pass per row
//! (max, log-sum-exp, pick) and keeps nothing; the backward allocates the single gradient
//! `g · (onehot(target) − softmax(logits))`. Values agree with the composed version to rounding
//! (see the test).

use candle_core::{CpuStorage, CustomOp1, Layout, Shape, Tensor};

/// Log-probabilities `[n]` of `targets` (`n` ids) under `logits` `[n, vocab]`.
///
/// # Errors
/// Shape mismatches, or a dtype other than f32/f64.
pub(crate) fn target_logprobs(logits: &Tensor, targets: &[u32]) -> candle_core::Result<Tensor> {
    let (n, v) = logits.dims2()?;
    if targets.len() != n {
        candle_core::bail!("target_logprobs: {} targets for {n} rows", targets.len());
    }
    if let Some(t) = targets.iter().find(|&&t| t as usize >= v) {
        candle_core::bail!("target_logprobs: target {t} outside the vocabulary of {v}");
    }
    logits.contiguous()?.apply_op1(TargetLogprob { targets: targets.to_vec() })
}

struct TargetLogprob {
    targets: Vec<u32>,
}

fn forward_rows<T: num_traits_like::Float>(x: &[T], v: usize, targets: &[u32]) -> Vec<T> {
    x.chunks_exact(v)
        .zip(targets)
        .map(|(row, &t)| {
            let max = row.iter().copied().fold(T::neg_infinity(), T::max);
            // Accumulate in f64: the sum over 50k terms loses digits in f32.
            let z: f64 = row.iter().map(|&a| (a - max).to_f64().exp()).sum();
            T::from_f64((row[t as usize] - max).to_f64() - z.ln())
        })
        .collect()
}

fn backward_rows<T: num_traits_like::Float>(x: &[T], v: usize, targets: &[u32], g: &[T]) -> Vec<T> {
    let mut out = vec![T::from_f64(0.0); x.len()];
    for (((row, o), &t), &gi) in x.chunks_exact(v).zip(out.chunks_exact_mut(v)).zip(targets).zip(g) {
        let max = row.iter().copied().fold(T::neg_infinity(), T::max);
        let z: f64 = row.iter().map(|&a| (a - max).to_f64().exp()).sum();
        let gz = gi.to_f64() / z;
        for (oj, &a) in o.iter_mut().zip(row) {
            *oj = T::from_f64(-gz * (a - max).to_f64().exp());
        }
        o[t as usize] = o[t as usize] + gi;
    }
    out
}

impl CustomOp1 for TargetLogprob {
    fn name(&self) -> &'static str {
        "target-logprob"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> candle_core::Result<(CpuStorage, Shape)> {
        let (n, v) = layout.shape().dims2()?;
        let (s, e) = layout.contiguous_offsets().ok_or_else(|| candle_core::Error::Msg("target-logprob: non-contiguous".into()))?;
        let out = match storage {
            CpuStorage::F32(x) => CpuStorage::F32(forward_rows(&x[s..e], v, &self.targets)),
            CpuStorage::F64(x) => CpuStorage::F64(forward_rows(&x[s..e], v, &self.targets)),
            _ => candle_core::bail!("target-logprob: only f32 and f64 are supported"),
        };
        Ok((out, Shape::from(n)))
    }

    fn bwd(&self, logits: &Tensor, _res: &Tensor, grad: &Tensor) -> candle_core::Result<Option<Tensor>> {
        let (n, v) = logits.dims2()?;
        let dev = logits.device();
        let logits = logits.contiguous()?;
        let out = match logits.dtype() {
            candle_core::DType::F32 => {
                let (x, g) = (logits.flatten_all()?.to_vec1::<f32>()?, grad.to_vec1::<f32>()?);
                Tensor::from_vec(backward_rows(&x, v, &self.targets, &g), (n, v), dev)?
            }
            candle_core::DType::F64 => {
                let (x, g) = (logits.flatten_all()?.to_vec1::<f64>()?, grad.to_vec1::<f64>()?);
                Tensor::from_vec(backward_rows(&x, v, &self.targets, &g), (n, v), dev)?
            }
            other => candle_core::bail!("target-logprob: unsupported dtype {other:?}"),
        };
        Ok(Some(out))
    }
}

/// The two float types the local kernels support, without a dependency on `num-traits`.
mod num_traits_like {
    pub(super) trait Float: Copy + PartialOrd + std::ops::Sub<Output = Self> + std::ops::Add<Output = Self> {
        fn neg_infinity() -> Self;
        fn max(self, o: Self) -> Self;
        fn to_f64(self) -> f64;
        fn from_f64(x: f64) -> Self;
    }
    impl Float for f32 {
        fn neg_infinity() -> Self {
            f32::NEG_INFINITY
        }
        fn max(self, o: Self) -> Self {
            f32::max(self, o)
        }
        fn to_f64(self) -> f64 {
            f64::from(self)
        }
        fn from_f64(x: f64) -> Self {
            x as f32
        }
    }
    impl Float for f64 {
        fn neg_infinity() -> Self {
            f64::NEG_INFINITY
        }
        fn max(self, o: Self) -> Self {
            f64::max(self, o)
        }
        fn to_f64(self) -> f64 {
            self
        }
        fn from_f64(x: f64) -> Self {
            x
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{D, Device, Var};

    #[test]
    fn matches_log_softmax_gather_in_value_and_gradient() {
        let dev = Device::Cpu;
        let x = Var::from_tensor(&(Tensor::arange(0f64, 15.0, &dev).unwrap().reshape((3, 5)).unwrap().sin().unwrap() * 3.0).unwrap()).unwrap();
        let targets = [4u32, 0, 2];
        let w = Tensor::new(&[1.0f64, -2.0, 0.5], &dev).unwrap();
        let a = target_logprobs(x.as_tensor(), &targets).unwrap();
        let t = Tensor::new(&targets, &dev).unwrap().unsqueeze(1).unwrap();
        let b = candle_nn::ops::log_softmax(x.as_tensor(), D::Minus1).unwrap().gather(&t, 1).unwrap().squeeze(1).unwrap();
        let (va, vb) = (a.to_vec1::<f64>().unwrap(), b.to_vec1::<f64>().unwrap());
        for (p, q) in va.iter().zip(&vb) {
            assert!((p - q).abs() < 1e-12);
        }
        let ga = (a * &w).unwrap().sum_all().unwrap().backward().unwrap().get(x.as_tensor()).unwrap().to_vec2::<f64>().unwrap();
        let gb = (b * &w).unwrap().sum_all().unwrap().backward().unwrap().get(x.as_tensor()).unwrap().to_vec2::<f64>().unwrap();
        for (ra, rb) in ga.iter().zip(&gb) {
            for (p, q) in ra.iter().zip(rb) {
                assert!((p - q).abs() < 1e-12, "{p} vs {q}");
            }
        }
    }
}
