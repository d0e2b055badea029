//! The origin pipeline's `make_datum`: a sampled trajectory becomes a training datum. (Its
//! `train_step`, a batch of datums becoming one optimizer step, is the engine's.)

use super::{Datum, LossFnInputs};

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
    make_multiturn_datum(tokens, &[(ob_len, logprobs)], advantage)
}

/// Builds the datum of a multi-turn trajectory: `tokens` is the whole conversation, and each
/// `(start, logprobs)` segment says that `tokens[start..start + logprobs.len()]` were sampled
/// (one answer); everything else (prompts, feedback turns, template glue) is context with zero
/// log-probability and advantage. Every sampled token carries the trajectory's `advantage`.
///
/// # Panics
/// A segment that starts at 0 or runs past the end, or overlapping segments: engine bugs.
pub fn make_multiturn_datum(tokens: &[u32], segments: &[(usize, &[f32])], advantage: f64) -> Datum {
    assert!(tokens.len() >= 2, "a trajectory needs a prompt token and a target");
    let n = tokens.len() - 1;
    let mut lp = vec![0.0f32; n];
    let mut adv = vec![0.0f32; n];
    let mut end = 1;
    for &(start, logprobs) in segments {
        assert!(start >= end && start + logprobs.len() <= tokens.len(), "segments are ordered, disjoint and follow a prompt token");
        // Position i predicts tokens[i + 1]: the segment's targets start at i = start - 1.
        for (k, &l) in logprobs.iter().enumerate() {
            lp[start - 1 + k] = l;
            adv[start - 1 + k] = advantage as f32;
        }
        end = start + logprobs.len();
    }
    Datum {
        model_input: tokens[..n].to_vec(),
        loss_fn_inputs: LossFnInputs { target_tokens: tokens[1..].to_vec(), weights: None, logprobs: Some(lp), advantages: Some(adv) },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seam::LossFn;

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
    fn multiturn_masks_feedback_and_glue() {
        // prompt [1, 2], answer [30, 31], feedback [4, 5], answer [60]
        let d = make_multiturn_datum(&[1, 2, 30, 31, 4, 5, 60], &[(2, &[-0.5, -0.25]), (6, &[-1.0])], -1.0);
        assert_eq!(d.model_input, vec![1, 2, 30, 31, 4, 5]);
        assert_eq!(d.loss_fn_inputs.target_tokens, vec![2, 30, 31, 4, 5, 60]);
        assert_eq!(d.loss_fn_inputs.logprobs.as_deref(), Some(&[0.0, -0.5, -0.25, 0.0, 0.0, -1.0][..]));
        assert_eq!(d.loss_fn_inputs.advantages.as_deref(), Some(&[0.0, -1.0, -1.0, 0.0, 0.0, -1.0][..]));
        // One segment is exactly make_datum.
        assert_eq!(make_multiturn_datum(&[10, 11, 12, 20, 21], &[(3, &[-0.5, -0.25])], 2.0), make_datum(&[10, 11, 12, 20, 21], &[-0.5, -0.25], 3, 2.0));
    }

    #[test]
    #[should_panic(expected = "segments are ordered")]
    fn overlapping_segments_are_a_bug() {
        make_multiturn_datum(&[1, 2, 3, 4], &[(2, &[-1.0, -1.0]), (3, &[-1.0])], 1.0);
    }

    #[test]
    #[should_panic(expected = "one logprob per completion token")]
    fn logprob_count_is_checked() {
        make_datum(&[1, 2, 3], &[-1.0, -1.0], 2, 1.0);
    }
}
