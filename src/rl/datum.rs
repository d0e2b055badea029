//! The origin pipeline's `make_datum` and `train_step`: a sampled trajectory becomes a training
//! datum, and a batch of datums becomes one optimizer step.

use crate::backend::{AdamParams, Datum, ForwardBackwardOutput, LossFn, LossFnInputs, OptimStepOutput, Result, Trainer};

/// Builds the datum of one trajectory.
///
/// `tokens` is the prompt followed by the completion, `ob_len` the prompt length, `logprobs` the
/// sampler's log-probabilities of the completion tokens (one per completion token) and
/// `advantage` the trajectory's advantage. With the shift-by-one of next-token prediction,
/// inputs are `tokens[..n-1]` and targets `tokens[1..]`; log-probabilities and advantages are 0 on
/// positions whose target is a prompt token, so only completion tokens carry gradient.
///
/// # Panics
/// When `logprobs` does not have one entry per completion token, or the trajectory has fewer than
/// two tokens: both are engine bugs, not input errors.
pub fn make_datum(tokens: &[u32], logprobs: &[f32], ob_len: usize, advantage: f64) -> Datum {
    assert!(tokens.len() >= 2 && ob_len >= 1 && ob_len <= tokens.len(), "a trajectory needs a prompt token and a target");
    assert_eq!(logprobs.len(), tokens.len() - ob_len, "one logprob per completion token");
    let n = tokens.len() - 1;
    // Position i predicts tokens[i + 1]; completion targets start at i = ob_len - 1.
    let first = ob_len - 1;
    let mut lp = vec![0.0f32; n];
    let mut adv = vec![0.0f32; n];
    for (k, &l) in logprobs.iter().enumerate() {
        lp[first + k] = l;
        adv[first + k] = advantage as f32;
    }
    Datum {
        model_input: tokens[..n].to_vec(),
        loss_fn_inputs: LossFnInputs { target_tokens: tokens[1..].to_vec(), weights: None, logprobs: Some(lp), advantages: Some(adv) },
    }
}

/// One optimizer step: `forward_backward` over the datums, then `optim_step`, back to back (on
/// Tinker both are submitted before either is awaited, so they pipeline on the service).
///
/// # Errors
/// Backend failures; nothing is applied if `forward_backward` fails.
pub fn train_step<T: Trainer + ?Sized>(trainer: &mut T, datums: &[Datum], loss: &LossFn, adam: &AdamParams) -> Result<(ForwardBackwardOutput, OptimStepOutput)> {
    let fb = trainer.forward_backward(datums, loss)?;
    let opt = trainer.optim_step(adam)?;
    Ok((fb, opt))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shift_and_masks() {
        // prompt [10, 11, 12], completion [20, 21]
        let d = make_datum(&[10, 11, 12, 20, 21], &[-0.5, -0.25], 3, 2.0);
        assert_eq!(d.model_input, vec![10, 11, 12, 20]);
        assert_eq!(d.loss_fn_inputs.target_tokens, vec![11, 12, 20, 21]);
        assert_eq!(d.loss_fn_inputs.logprobs.as_deref(), Some(&[0.0, 0.0, -0.5, -0.25][..]));
        assert_eq!(d.loss_fn_inputs.advantages.as_deref(), Some(&[0.0, 0.0, 2.0, 2.0][..]));
        d.validate(0, &LossFn::ImportanceSampling).unwrap();
    }

    #[test]
    #[should_panic(expected = "one logprob per completion token")]
    fn logprob_count_is_checked() {
        make_datum(&[1, 2, 3], &[-1.0, -1.0], 2, 1.0);
    }
}
