//! Micro-batch layout of the local trainer, and prompt sharing: the sequences of a GRPO group
//! repeat one prompt, which on the quickstart is ~78% of the tokens a training step processes.
//!
//! Consecutive datums whose inputs share a prefix go into one packed row: the shared positions
//! `0..s` once, then each datum's positions `s..n` as its own segment (tokens attend to the
//! prefix and to their own segment, at their own positions; see `train_pass::Packing`). Token
//! `s` (the prompt's last, for a group) starts every segment, so that its prediction — the first
//! sampled token, different per datum — stays one target per position. Only positions that add
//! nothing to the loss are shared (zero weight, zero advantage, no KL term, and the same target
//! in every datum), so the loss, its gradient and every datum's log-probabilities are those of
//! the plain layout up to float summation order. Losses that are not a sum over tokens of a
//! row's own inputs (GSPO's and sequence-MIS's per-row ratio, DRO's penalty on every token) are
//! never packed.

use crate::seam::{Datum, KlLoss, LossFn};

/// One row of a micro-batch: `count` consecutive datums, packed when `shared > 0` (their first
/// `shared` positions once, then the rest of each as a segment), else one plain datum.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Row {
    pub count: usize,
    pub shared: usize,
}

/// A micro-batch: the consecutive datums `data`, starting at index `first` of the call's datums,
/// laid out in `rows`.
#[derive(Debug)]
pub(crate) struct Chunk<'a> {
    pub data: &'a [Datum],
    pub first: usize,
    pub rows: Vec<Row>,
}

/// Which positions a packed row may share.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Sharing<'a> {
    /// No loss (log-probabilities only): any common prefix.
    Any,
    /// Positions where `loss` (and the KL term) of every sharing datum is zero.
    Loss(&'a LossFn, Option<&'a KlLoss>),
}

impl<'a> Sharing<'a> {
    /// The sharing `loss` allows, if any (see the module doc).
    pub(crate) fn for_loss(loss: &'a LossFn, kl: Option<&'a KlLoss>) -> Option<Self> {
        match loss {
            LossFn::Gspo { .. } | LossFn::Dro { .. } | LossFn::MaskedImportanceSampling { sequence: true, .. } => None,
            _ => Some(Self::Loss(loss, kl)),
        }
    }

    /// Whether position `j` of datum `d` (index `i`) adds nothing to the loss or its gradient.
    fn inert(self, d: &Datum, i: usize, j: usize) -> bool {
        let Self::Loss(loss, kl) = self else { return true };
        let inp = &d.loss_fn_inputs;
        let policy = match loss {
            LossFn::CrossEntropy => inp.weights.as_ref().is_some_and(|w| w.get(j) == Some(&0.0)),
            // `A = 0` (absent advantages read as zeros) zeroes the term and its gradient.
            _ => inp.advantages.as_ref().is_none_or(|a| a.get(j) == Some(&0.0)),
        };
        policy && kl.is_none_or(|k| k.coef.get(i).and_then(|c| c.get(j)) == Some(&0.0))
    }
}

/// How many leading positions datums `a` and `b` (indices `ia`, `ib`) can share: each must
/// keep at least one position of its own, and a shared position has the same input prefix and
/// target in both and is inert in both.
fn shareable(data: &[Datum], ia: usize, ib: usize, sharing: Sharing<'_>) -> usize {
    let (a, b) = (&data[ia], &data[ib]);
    let common = a.model_input.iter().zip(&b.model_input).take_while(|(x, y)| x == y).count();
    let (ta, tb) = (&a.loss_fn_inputs.target_tokens, &b.loss_fn_inputs.target_tokens);
    (0..common.saturating_sub(1)).take_while(|&j| ta[j] == tb[j] && sharing.inert(a, ia, j) && sharing.inert(b, ib, j)).count()
}

/// Positions of a row of `datums` laid out as `row`.
pub(crate) fn row_len(datums: &[Datum], row: Row) -> usize {
    row.shared + datums.iter().map(|d| d.model_input.len() - row.shared).sum::<usize>()
}

/// Rows for a group of datums that share `shared` positions: as few packed rows as keep each
/// within `cap` positions, members spread evenly (two rows of four pad less than seven and one).
fn split_group(group: &[Datum], shared: usize, cap: usize, rows: &mut Vec<Row>) {
    let m = group.len();
    let sizes = |r: usize| (0..r).map(move |k| m / r + usize::from(k < m % r));
    let fits = |r: usize| {
        let mut start = 0;
        sizes(r).all(|c| {
            let ok = row_len(&group[start..start + c], Row { count: c, shared }) <= cap;
            start += c;
            ok
        })
    };
    let r = (1..m).find(|&r| fits(r)).unwrap_or(m);
    rows.extend(sizes(r).map(|c| if c > 1 { Row { count: c, shared } } else { Row { count: 1, shared: 0 } }));
}

/// Rows of `data` in order: packed where `sharing` allows (`None`: one plain row per datum).
fn rows(data: &[Datum], cap: usize, sharing: Option<Sharing<'_>>) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut i = 0;
    while i < data.len() {
        let (mut end, mut shared) = (i + 1, usize::MAX);
        if let Some(sharing) = sharing {
            // A datum joins while it shares at least what the group already does (a datum
            // sharing less starts a group of its own instead of shrinking this one).
            while end < data.len() {
                let s = shareable(data, i, end, sharing);
                if s == 0 || (end > i + 1 && s < shared) {
                    break;
                }
                shared = shared.min(s);
                end += 1;
            }
        }
        if end - i < 2 {
            rows.push(Row { count: 1, shared: 0 });
        } else {
            split_group(&data[i..end], shared, cap, &mut rows);
        }
        i = end;
    }
    rows
}

/// Micro-batches of `data`: rows (see [`rows`]) gathered while the padded batch (rows × the
/// longest row) stays within `cap` positions; a row longer than `cap` goes alone.
pub(crate) fn plan<'a>(data: &'a [Datum], cap: usize, sharing: Option<Sharing<'_>>) -> Vec<Chunk<'a>> {
    let cap = cap.max(1);
    let mut out = Vec::new();
    let (mut chunk_rows, mut first, mut next, mut longest) = (Vec::<Row>::new(), 0usize, 0usize, 0usize);
    for row in rows(data, cap, sharing) {
        let len = row_len(&data[next..next + row.count], row);
        let l = longest.max(len);
        if !chunk_rows.is_empty() && l * (chunk_rows.len() + 1) > cap {
            out.push(Chunk { data: &data[first..next], first, rows: std::mem::take(&mut chunk_rows) });
            first = next;
            longest = len;
        } else {
            longest = l;
        }
        chunk_rows.push(row);
        next += row.count;
    }
    out.push(Chunk { data: &data[first..next], first, rows: chunk_rows });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::seam::LossFnInputs;

    /// A datum of `prompt` then `completion`, advantages on the completion only.
    fn datum(prompt: &[u32], completion: &[u32]) -> Datum {
        let input: Vec<u32> = prompt.iter().chain(completion).copied().collect();
        let n = input.len();
        let mut targets = input[1..].to_vec();
        targets.push(99);
        let adv = (0..n).map(|j| if j + 1 >= prompt.len() { 1.0 } else { 0.0 }).collect();
        Datum { model_input: input, loss_fn_inputs: LossFnInputs { target_tokens: targets, weights: None, logprobs: None, advantages: Some(adv) } }
    }

    #[test]
    fn a_group_packs_and_a_different_prompt_does_not() {
        let p = [5, 6, 7, 8];
        let data = vec![datum(&p, &[1, 2]), datum(&p, &[3]), datum(&p, &[4, 4, 4]), datum(&[9, 9, 9], &[1])];
        let is = LossFn::ImportanceSampling;
        let plan = plan(&data, 4096, Sharing::for_loss(&is, None));
        assert_eq!(plan.len(), 1);
        // The prompt's last token starts each segment: 3 shared positions.
        assert_eq!(plan[0].rows, vec![Row { count: 3, shared: 3 }, Row { count: 1, shared: 0 }]);
        assert_eq!(row_len(&data[..3], plan[0].rows[0]), 3 + 3 + 2 + 4);
        // GSPO's per-row ratio never packs.
        let gspo = LossFn::GSPO;
        assert!(plan_rows(&data, 4096, Sharing::for_loss(&gspo, None)).iter().all(|r| r.shared == 0));
    }

    fn plan_rows(data: &[Datum], cap: usize, s: Option<Sharing<'_>>) -> Vec<Row> {
        plan(data, cap, s).into_iter().flat_map(|c| c.rows).collect()
    }

    #[test]
    fn a_weighted_prompt_position_limits_what_is_shared() {
        let p = [5, 6, 7, 8];
        let mut data = vec![datum(&p, &[1, 2]), datum(&p, &[3])];
        data[1].loss_fn_inputs.advantages.as_mut().unwrap()[1] = 0.5;
        let is = LossFn::ImportanceSampling;
        assert_eq!(plan_rows(&data, 4096, Sharing::for_loss(&is, None)), vec![Row { count: 2, shared: 1 }]);
        // Log-probabilities alone share the whole common prefix.
        assert_eq!(plan_rows(&data, 4096, Some(Sharing::Any)), vec![Row { count: 2, shared: 3 }]);
    }

    #[test]
    fn a_group_longer_than_the_cap_splits_evenly_with_the_prefix_in_each_row() {
        let p = [1; 10];
        let data: Vec<Datum> = (0..5).map(|k| datum(&p, &[2 + k, 3, 4, 5])).collect();
        // 9 shared + 5 × 5 = 34 > 30; rows of 3 and 2 members: 24 and 19.
        let rows = plan_rows(&data, 30, Some(Sharing::Any));
        assert_eq!(rows, vec![Row { count: 3, shared: 9 }, Row { count: 2, shared: 9 }]);
        // Without sharing, the plain layout (one datum per row).
        assert!(plan_rows(&data, 30, None).iter().all(|r| *r == Row { count: 1, shared: 0 }));
    }
}
