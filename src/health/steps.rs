//! The shapes of the checks after a step, over [`Seen`]: a condition held for the last `steps`
//! steps, a metric's window mean, a metric collapsed against the run's first steps, a rate fallen
//! from the window's best, a value exploding against its median. The table's rows
//! (`signals.rs`) combine them with a metric and a message.

use crate::runlog::metrics::{optim, train};

use super::history::{Point, Seen};
use super::text::{fmt, pct};

/// `fits` held at each of the last `steps` steps (a step without the metric breaks the streak):
/// the steps' range, `3–7`.
pub(crate) fn streak(s: &Seen<'_>, fits: impl Fn(&Point) -> Option<bool>) -> Option<String> {
    let n = s.t("steps") as usize;
    let h = s.history;
    let last = h.steps.len().checked_sub(n)?;
    let run = &h.steps[last..];
    run.iter().all(|p| fits(p) == Some(true)).then(|| format!("steps {}–{}", run[0].step, run[n - 1].step))
}

/// The mean of `name` over the last `window` steps, when every one of them has it.
pub(crate) fn window_mean(s: &Seen<'_>, name: &str) -> Option<f64> {
    let h = s.history;
    let start = h.steps.len().checked_sub(s.window as usize)?;
    let xs: Option<Vec<f64>> = h.steps[start..].iter().map(|p| p.get(name)).collect();
    let xs = xs?;
    Some(xs.iter().sum::<f64>() / xs.len() as f64)
}

/// The mean of `name` over the last `window` steps when it is above the setting's `rate`.
pub(crate) fn window_above(s: &Seen<'_>, name: &str) -> Option<f64> {
    window_mean(s, name).filter(|&m| m > s.t("rate"))
}

/// `name`'s mean over the last `window` steps below `fraction` of its mean over the first
/// `window` (the two windows apart: at least 2·window steps with the metric).
pub(crate) fn collapse(s: &Seen<'_>, name: &str) -> Option<String> {
    let (w, fraction) = (s.window as usize, s.t("fraction"));
    let xs: Vec<(i64, f64)> = s.history.steps.iter().filter_map(|p| Some((p.step, p.get(name)?))).filter(|x| x.1.is_finite()).collect();
    if w == 0 || xs.len() < 2 * w {
        return None;
    }
    let mean = |s: &[(i64, f64)]| s.iter().map(|x| x.1).sum::<f64>() / s.len() as f64;
    let (first, last) = (&xs[..w], &xs[xs.len() - w..]);
    let (a, b) = (mean(first), mean(last));
    (a > 0.0 && b < fraction * a).then(|| {
        format!(
            "{name} {} over steps {}–{}, {} of its {} over steps {}–{} (threshold {})",
            fmt(b),
            last[0].0,
            last[w - 1].0,
            pct(b / a),
            fmt(a),
            first[0].0,
            first[w - 1].0,
            pct(fraction)
        )
    })
}

/// `train/format_rate` fell by more than `drop` below its best of the window.
pub(crate) fn format_falling(s: &Seen<'_>) -> Option<String> {
    let h = s.history;
    let drop = s.t("drop");
    let start = h.steps.len().saturating_sub(s.window as usize);
    let now = h.last()?.get(train::FORMAT_RATE)?;
    let (best_step, best) = h.steps[start..].iter().filter_map(|p| Some((p.step, p.get(train::FORMAT_RATE)?))).fold((0, f64::MIN), |a, b| if b.1 > a.1 { b } else { a });
    (best - now > drop).then(|| format!("train/format_rate fell from {} at step {best_step} to {} (more than {})", pct(best), pct(now), pct(drop)))
}

/// The loss or the gradient norm not finite, or the gradient norm or the mean importance ratio
/// above `factor` times its median over the window.
pub(crate) fn exploding(s: &Seen<'_>) -> Option<String> {
    let h = s.history;
    let p = h.last()?;
    let earlier = &h.steps[h.steps.len().saturating_sub(s.window as usize + 1)..h.steps.len() - 1];
    for name in [train::LOSS, optim::GRAD_NORM] {
        if let Some(now) = p.get(name)
            && !now.is_finite()
        {
            return Some(format!("{name} is {now}"));
        }
    }
    // The gradient norm and the mean importance ratio against their medians, not the loss: it
    // is a sum of advantage-weighted terms whose size swings with the step's advantages (40×
    // between two healthy quickstart steps). The mean ratio stays within 0.98–1.05 there.
    for name in [optim::GRAD_NORM, train::RATIO_MEAN] {
        let Some(now) = p.get(name) else { continue };
        let mut prev: Vec<f64> = earlier.iter().filter_map(|q| q.get(name)).filter(|x| x.is_finite()).map(f64::abs).collect();
        // A median of fewer than three steps is one noisy step.
        if prev.len() < 3 {
            continue;
        }
        let median = crate::quantile::quantile(&mut prev, 0.5);
        if median > 0.0 && now.abs() > s.t("factor") * median {
            return Some(format!("{name} {} is {:.1}× its median over the previous {} steps ({})", fmt(now), now.abs() / median, prev.len(), fmt(median)));
        }
    }
    None
}
