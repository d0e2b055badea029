//! Arms: runs that differ only in `seed` (and in what [`super::configdiff::is_hidden`] hides)
//! are replicates of one recipe, an arm. Also the aggregation of an arm's curves over its seeds.

use std::collections::BTreeMap;

use super::configdiff::{label_name, letter, middle_cut};
use super::load::Run;
use super::stats::{Interval, seed_mean};

/// The longest label an arm gets from its one differing value; longer ones are cut in the
/// middle (a label heads table columns and verdict lines, so it must stay short).
const MAX_LABEL: usize = 28;

/// How config values are shown: key → value → shown value (paths below their common
/// directory; see [`super::configdiff::shown`]). A value missing here is shown as it is.
pub(crate) type Shown = BTreeMap<String, BTreeMap<String, String>>;

/// A value as [`Shown`] shows it.
pub(crate) fn show<'a>(shown: &'a Shown, key: &str, value: &'a str) -> &'a str {
    shown.get(key).and_then(|m| m.get(value)).map_or(value, String::as_str)
}

/// One arm: its runs (indices into the run list) and what sets it apart.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Arm {
    /// Its short name: the differing value when one key differs (`lr=0.0003`), a letter (`A`,
    /// `B`, ...) when several do (with [`Arm::settings`] as the legend), the experiment name
    /// when none does.
    pub label: String,
    /// The differing keys and this arm's values of them, as shown (`—` when it lacks one).
    pub settings: Vec<(String, String)>,
    /// Indices of its runs, in input order.
    pub runs: Vec<usize>,
}

/// Groups `runs` into arms by their values of the `differing` keys, in order of first
/// appearance, and labels them (see [`Arm::label`]); `lettered` says whether the labels are
/// letters that need a legend.
pub(crate) fn group(runs: &[Run], differing: &[String], shown: &Shown) -> (Vec<Arm>, bool) {
    let mut arms: Vec<(Vec<Option<String>>, Arm)> = vec![];
    for (i, r) in runs.iter().enumerate() {
        let key: Vec<Option<String>> = differing.iter().map(|k| r.config.get(k).cloned()).collect();
        match arms.iter_mut().find(|(k, _)| *k == key) {
            Some((_, arm)) => arm.runs.push(i),
            None => {
                let settings = differing.iter().zip(&key).map(|(k, v)| (k.clone(), v.as_deref().map_or("—", |v| show(shown, k, v)).to_string())).collect();
                let label = r.config.get("name").cloned().unwrap_or_else(|| "all runs".into());
                arms.push((key, Arm { label, settings, runs: vec![i] }));
            }
        }
    }
    let mut arms: Vec<Arm> = arms.into_iter().map(|(_, a)| a).collect();
    if differing.is_empty() {
        return (arms, false);
    }
    let by_value: Vec<String> = arms.iter().map(|a| one_value_label(&a.settings)).collect();
    let unique = by_value.iter().collect::<std::collections::BTreeSet<_>>().len() == by_value.len();
    let lettered = differing.len() > 1 || !unique;
    for (i, a) in arms.iter_mut().enumerate() {
        a.label = if lettered { letter(i) } else { by_value[i].clone() };
    }
    (arms, lettered)
}

/// The label of an arm set apart by one value: `name=value` (`lr=0.0003`, `beta1=0.95`), or the
/// path itself for a file (`…/data/b.jsonl`), cut in the middle past [`MAX_LABEL`].
fn one_value_label(settings: &[(String, String)]) -> String {
    let Some((k, v)) = settings.first() else { return String::new() };
    let label = if v.contains('/') { v.clone() } else { format!("{}={v}", label_name(k)) };
    middle_cut(&label, MAX_LABEL)
}

/// A point of an arm's aggregated curve.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Point {
    /// x (step or seconds).
    pub x: f64,
    /// Mean over the runs covering x.
    pub mean: f64,
    /// 95% t interval over them; `None` where fewer than 2 runs cover x.
    pub band: Option<Interval>,
    /// Runs covering x.
    pub n: usize,
}

/// The mean curve of several runs' `(x, y)` series with a 95% t band.
///
/// The grid is the union of every run's x values. Each run contributes at a grid x only inside
/// its own observed range, by its value there or by linear interpolation between its two
/// neighbours; it is never extrapolated. So runs that log the same steps align exactly, a run
/// that stopped early stops contributing where it stopped, and the band is drawn only where two
/// or more runs cover x. (W&B's bucketing across runs shifts x values, wandb#1566/#4879, and
/// Aim de-duplicates equal values across runs; neither happens here.)
pub(crate) fn aggregate(series: &[Vec<(f64, f64)>]) -> Vec<Point> {
    let mut grid: Vec<f64> = series.iter().flatten().map(|&(x, _)| x).collect();
    grid.sort_by(f64::total_cmp);
    grid.dedup();
    grid.into_iter()
        .filter_map(|x| {
            let ys: Vec<f64> = series.iter().filter_map(|s| interpolate(s, x)).collect();
            if ys.is_empty() {
                return None;
            }
            let m = seed_mean(&ys);
            Some(Point { x, mean: m.mean, band: m.ci, n: ys.len() })
        })
        .collect()
}

/// The value of a series (sorted by x) at `x`, linearly interpolated; `None` outside its range.
fn interpolate(s: &[(f64, f64)], x: f64) -> Option<f64> {
    let (first, last) = (s.first()?, s.last()?);
    if x < first.0 || x > last.0 {
        return None;
    }
    let i = s.partition_point(|p| p.0 < x);
    let hi = s[i];
    if hi.0 == x || i == 0 {
        return Some(hi.1);
    }
    let lo = s[i - 1];
    Some(lo.1 + (hi.1 - lo.1) * (x - lo.0) / (hi.0 - lo.0))
}

/// The seeds of an arm's runs, as text, in run order (`?` for a run without a resolved spec).
pub(crate) fn seeds(runs: &[Run], arm: &Arm) -> Vec<String> {
    arm.runs.iter().map(|&i| runs[i].seed().unwrap_or("?").to_string()).collect()
}

/// Per-key values of the differing keys for one run (for the runs table), in full.
pub(crate) fn values(run: &Run, differing: &[String]) -> BTreeMap<String, String> {
    differing.iter().map(|k| (k.clone(), run.config.get(k).cloned().unwrap_or_else(|| "—".into()))).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregates_without_extrapolating() {
        // Two seeds on steps 0..4; the second stops at step 2.
        let a = vec![(0.0, 0.0), (1.0, 1.0), (2.0, 2.0), (3.0, 3.0), (4.0, 4.0)];
        let b = vec![(0.0, 2.0), (2.0, 4.0)];
        let pts = aggregate(&[a, b]);
        assert_eq!(pts.iter().map(|p| p.x).collect::<Vec<_>>(), vec![0.0, 1.0, 2.0, 3.0, 4.0]);
        // At x = 1, b is interpolated to 3: mean 2, two runs, a band.
        assert_eq!((pts[1].mean, pts[1].n), (2.0, 2));
        let band = pts[1].band.unwrap();
        // sd of (1, 3) = √2; half-width 12.7062·√2/√2 = 12.7062 (t with 1 df).
        assert!((band.hi - 2.0 - 12.706_204_736).abs() < 1e-6, "{band:?}");
        // Beyond step 2 only a remains: no band.
        assert_eq!((pts[3].mean, pts[3].n, pts[3].band), (3.0, 1, None));
    }
}
