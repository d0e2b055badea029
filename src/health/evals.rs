//! The checks after an eval: train reward rising while eval pass@1 stays flat (with leads),
//! greedy pass@1 against the first eval's, problem by problem (exact McNemar), and pass@k at
//! the largest k against pass@1 (coverage); and pass@1 split into format and correctness given
//! format, for the doctor's eval line.

use crate::rl::signif::mcnemar;
use crate::runlog::MetricsLine;
use crate::runlog::metrics::{eval as names, train};

use super::history::{Evidence, Seen};
use super::text::{fmt, p_text, pct};

/// How the first eval is named: `the baseline` (−1) or `step N`.
fn first_name(step: i64) -> String {
    if step < 0 { "the baseline".to_owned() } else { format!("step {step}") }
}

/// Train reward's window mean rose by `reward_rise` from the first steps to the last while
/// eval pass@1 gained less than `eval_gain` over the first eval. Leads: rollouts rewarded
/// without passing, else the problems whose pass rate rose most.
pub(crate) fn reward_without_eval_gain(s: &Seen<'_>) -> Option<Evidence> {
    let h = s.history;
    let (&(first_step, first), &(_, now)) = (h.evals.first()?, h.evals.last()?);
    if h.evals.len() < 2 {
        return None;
    }
    let rewards: Vec<(i64, f64)> = h.steps.iter().filter_map(|p| Some((p.step, p.get(train::REWARD_MEAN)?))).collect();
    let w = (s.window as usize).min(rewards.len() / 2);
    if w == 0 {
        return None;
    }
    let mean = |xs: &[(i64, f64)]| xs.iter().map(|x| x.1).sum::<f64>() / xs.len() as f64;
    let (early, late) = (&rewards[..w], &rewards[rewards.len() - w..]);
    let rise = mean(late) - mean(early);
    let gain = now - first;
    if rise < s.t("reward_rise") || gain >= s.t("eval_gain") {
        return None;
    }
    let text = format!(
        "train/reward_mean rose {} (steps {}–{}: {} → steps {}–{}: {}) while eval pass@1 went {} → {} since {}",
        fmt(rise),
        early[0].0,
        early[w - 1].0,
        fmt(mean(early)),
        late[0].0,
        late[w - 1].0,
        fmt(mean(late)),
        pct(first),
        pct(now),
        first_name(first_step),
    );
    Some(Evidence { text, leads: h.leads.list(early[0].0, late[0].0) })
}

/// Greedy pass@1 fell from the first eval's beyond noise: on the problems both evaluated, more
/// lost than gained, with exact McNemar p below `p`. Leads: the problems lost.
pub(crate) fn greedy_below(s: &Seen<'_>) -> Option<Evidence> {
    let ((fs, first), (ns, now)) = (s.history.greedy_first.as_ref()?, s.history.greedy_now.as_ref()?);
    if fs == ns {
        return None;
    }
    let shared: Vec<(&String, bool, bool)> = first.iter().filter_map(|(id, &was)| Some((id, was, *now.get(id)?))).collect();
    let gained = shared.iter().filter(|(_, was, is)| *is && !*was).count() as u64;
    let lost: Vec<&String> = shared.iter().filter(|(_, was, is)| *was && !*is).map(|(id, _, _)| *id).collect();
    let m = mcnemar(gained, lost.len() as u64);
    let threshold = s.t("p");
    if (lost.len() as u64) <= gained || m.p >= threshold {
        return None;
    }
    let n = shared.len().max(1) as f64;
    let rate = |pass: usize| pct(pass as f64 / n);
    let text = format!(
        "greedy pass@1 {} at {} → {} at step {ns} on {} problems: {} lost, {gained} gained (exact McNemar p = {}, threshold {threshold})",
        rate(shared.iter().filter(|s| s.1).count()),
        first_name(*fs),
        rate(shared.iter().filter(|s| s.2).count()),
        shared.len(),
        lost.len(),
        p_text(m.p),
    );
    let leads = lost.iter().take(5).map(|id| format!("eval problem {id}: passed greedily at {}, fails at step {ns}", first_name(*fs))).collect();
    Some(Evidence { text, leads })
}

/// pass@k at the largest k (> 1) fell by more than `drop` from the first eval's while pass@1
/// rose.
pub(crate) fn coverage(s: &Seen<'_>) -> Option<String> {
    let evals = &s.history.eval_metrics;
    let ((fs, first), (ns, now)) = (evals.first()?, evals.last()?);
    if fs == ns {
        return None;
    }
    let k = now.keys().filter_map(|m| names::parse_pass_at(m)).max().filter(|&k| k > 1)?;
    let (big, one) = (names::pass_at(k), names::pass_at(1));
    let (was, is) = (*first.get(&big)?, *now.get(&big)?);
    let (was1, is1) = (*first.get(&one)?, *now.get(&one)?);
    let drop = s.t("drop");
    (was - is > drop && is1 > was1).then(|| {
        format!(
            "eval pass@{k} fell {} → {} since {} (more than {}) while pass@1 rose {} → {}: fewer problems solved by any of {k} samples",
            pct(was),
            pct(is),
            first_name(*fs),
            pct(drop),
            pct(was1),
            pct(is1)
        )
    })
}

/// `format: sampled pass@1 well-formed 74.0% → 99.6%, given well-formed 29.7% → 51.0%; ...`:
/// each protocol's pass@1 as the rate of well-formed completions (an extractable answer) times the
/// pass rate among them, at the baseline and at step `s`, so a reader sees whether a gain is the
/// format or the answers. `protocols`: (name, greedy?) as the eval line names them. `None` when no
/// protocol logged its format rate at both steps.
pub(crate) fn format_split(lines: &[MetricsLine], s: i64, protocols: &[(&str, bool)]) -> Option<String> {
    let at = |step: i64, m: &str| lines.iter().filter(|l| if step < 0 { l.step < 0 } else { l.step == step }).find_map(|l| l.get(m));
    let parts: Vec<String> = protocols
        .iter()
        .filter_map(|&(name, greedy)| {
            let (format, pass) = if greedy { (names::GREEDY_FORMAT_RATE.to_string(), names::GREEDY_PASS_AT_1.to_string()) } else { (names::FORMAT_RATE.to_string(), names::pass_at(1)) };
            let (f0, f1, p0, p1) = (at(-1, &format)?, at(s, &format)?, at(-1, &pass)?, at(s, &pass)?);
            let given = |p: f64, f: f64| if f > 0.0 { pct(p / f) } else { "—".into() };
            Some(format!("{name} well-formed {} → {}, given well-formed {} → {}", pct(f0), pct(f1), given(p0, f0), given(p1, f1)))
        })
        .collect();
    (!parts.is_empty()).then(|| format!("format: {}", parts.join("; ")))
}
