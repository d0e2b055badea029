//! Random search: `rlx sweep --sample N [--sample-seed S]` draws N configurations instead of
//! forming the grid.
//!
//! Every varying key is drawn, independently: a range of [`crate::spec::sample`]
//! (`loguniform(1e-6,1e-4)`, `range(0,3)`, ...) from its distribution, a list axis (`[a,b]`,
//! `a,b`) uniformly from its values; fixed `key=value` arguments apply to every configuration.
//! Draws come from one [`SplitMix64`] stream seeded with `S`, configuration by configuration and
//! key by key in command-line order, so the same command line always yields the same
//! configurations, and so the same run ids (which hash the resolved spec): a re-launched sampled
//! sweep finds its finished runs like a grid does. A larger N keeps the first configurations of a
//! smaller one.
//!
//! Drawn numbers are written with 4 significant digits (`3.162e-5`, `0.618`), the text that
//! is recorded, shown and hashed; they stay within the range's bounds. A configuration drawn
//! twice is drawn again, so the N are distinct.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

use crate::rng::SplitMix64;
use crate::spec::overrides::{Axis, Override};
use crate::plan::Error;
use crate::spec::sample::{Distribution, Ranged};
use crate::plan::sweep::{self, AxisRecord, MAX_MEMBERS, Sweep};
use crate::spec::{Diagnostic, Diagnostics};

/// A key that varies between configurations.
#[derive(Debug, Clone)]
pub(crate) enum Dimension {
    /// A list axis: one of its values.
    List(Axis),
    /// A range: a value drawn from it.
    Ranged(Ranged),
}

impl Dimension {
    fn dotted(&self) -> String {
        match self {
            Dimension::List(a) => a.dotted(),
            Dimension::Ranged(r) => r.dotted(),
        }
    }

    fn key_span(&self) -> &crate::spec::source::Span {
        match self {
            Dimension::List(a) => &a.key_span,
            Dimension::Ranged(r) => &r.key_span,
        }
    }

    /// How many distinct values it can take (`None`: as many as floats in a range).
    fn cardinality(&self) -> Option<usize> {
        match self {
            Dimension::List(a) => Some(a.values.len()),
            Dimension::Ranged(r) => match &r.dist {
                Distribution::Choice(v) => Some(v.len()),
                Distribution::Range { .. } => Some(usize::try_from(r.dist.range_len()).unwrap_or(usize::MAX)),
                _ => None,
            },
        }
    }

    /// The sweep record's line for it: a list's values, or the range as written.
    fn record(&self) -> AxisRecord {
        match self {
            Dimension::List(a) => AxisRecord {
                key: a.dotted(),
                values: a.values.iter().map(|v| v.span.text().trim().to_string()).collect(),
                replicate: a.is_replicate(),
            },
            Dimension::Ranged(r) => AxisRecord { key: r.dotted(), values: vec![r.expression().to_string()], replicate: r.path == ["seed"] },
        }
    }

    fn draw(&self, rng: &mut SplitMix64) -> Override {
        match self {
            Dimension::List(a) => a.at(pick(rng, a.values.len())),
            Dimension::Ranged(r) => match &r.dist {
                Distribution::Choice(nodes) => {
                    let n = &nodes[pick(rng, nodes.len())];
                    Override { path: r.path.clone(), value: n.clone(), key_span: r.key_span.clone(), raw: r.raw.clone() }
                }
                Distribution::Range { .. } => r.with_value(&r.dist.range_value(rng.below(r.dist.range_len())).to_string()),
                Distribution::Uniform { low, high } => r.with_value(&number_text(low + (high - low) * unit(rng), *low, *high)),
                Distribution::LogUniform { low, high } => {
                    let (a, b) = (low.ln(), high.ln());
                    r.with_value(&number_text((a + (b - a) * unit(rng)).exp(), *low, *high))
                }
            },
        }
    }
}

fn pick(rng: &mut SplitMix64, n: usize) -> usize {
    rng.below(n as u64) as usize
}

/// A uniform float in `[0, 1)` from the top 53 bits.
fn unit(rng: &mut SplitMix64) -> f64 {
    (rng.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
}

/// `v` with 4 significant digits, kept within `[low, high]`: plain decimals between 1e-3 and 1e4
/// (`0.618`, `12.5`), scientific notation otherwise (`3.162e-5`), both YAML numbers.
pub(crate) fn number_text(v: f64, low: f64, high: f64) -> String {
    let rounded: f64 = format!("{v:.3e}").parse().unwrap_or(v);
    let r = rounded.clamp(low, high);
    if r == 0.0 || (1e-3..1e4).contains(&r.abs()) {
        let s = format!("{r}");
        // `2` would read back as an integer; a drawn float stays a float.
        if s.contains(['.', 'e', 'E']) { s } else { format!("{s}.0") }
    } else {
        format!("{r:e}")
    }
}

/// What a sampled sweep was drawn with, for its record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Sampling {
    /// Configurations drawn.
    pub n: usize,
    /// The seed of the stream.
    pub seed: u64,
}

/// Draws `sampling.n` distinct configurations and plans each one into a member of a [`Sweep`].
///
/// # Errors
/// [`Error::Invalid`] when the ranges hold fewer than N distinct configurations, when a key
/// varies twice, or with every problem of the drawn members (as [`sweep::expand`]).
pub(crate) fn expand(spec_path: &Path, fixed: Vec<Override>, dims: &[Dimension], sampling: Sampling, checkpoints: Option<&dyn crate::plan::Checkpoints>) -> Result<Sweep, Error> {
    let invalid = |d: Vec<Diagnostic>| Error::Invalid { path: spec_path.to_path_buf(), diagnostics: Diagnostics(d) };
    let mut keys = BTreeSet::new();
    for d in dims {
        if !keys.insert(d.dotted()) {
            return Err(invalid(vec![Diagnostic::new(format!("`{}` varies twice", d.dotted()), Some(d.key_span().clone())).hint("give each key one range or list")]));
        }
    }
    if sampling.n > MAX_MEMBERS {
        return Err(invalid(vec![Diagnostic::new(format!("`--sample {}`: at most {MAX_MEMBERS} runs are allowed", sampling.n), None)]));
    }
    let space = dims.iter().try_fold(1usize, |acc, d| d.cardinality().map(|c| acc.saturating_mul(c)));
    if let Some(space) = space
        && space < sampling.n
    {
        return Err(invalid(vec![
            Diagnostic::new(format!("`--sample {}`: the ranges hold only {space} distinct configuration(s)", sampling.n), None)
                .hint(format!("draw at most {space}, widen a range, or list the grid without `--sample`")),
        ]));
    }
    let mut rng = SplitMix64::new(sampling.seed);
    let mut seen = BTreeSet::new();
    let mut points = vec![];
    // Enough tries that only a space barely larger than N can run out (then say so).
    let mut tries = sampling.n.saturating_mul(100).max(1000);
    while points.len() < sampling.n {
        if tries == 0 {
            return Err(invalid(vec![
                Diagnostic::new(format!("`--sample {}`: found only {} distinct configurations after many draws", sampling.n, points.len()), None)
                    .hint("lower `--sample` or widen a range"),
            ]));
        }
        tries -= 1;
        let drawn: Vec<Override> = dims.iter().map(|d| d.draw(&mut rng)).collect();
        let key: Vec<String> = drawn.iter().map(Override::canonical).collect();
        if !seen.insert(key) {
            continue;
        }
        let assignment: BTreeMap<String, String> = drawn.iter().map(|o| (o.dotted(), o.value.span.text().trim().to_string())).collect();
        let mut overrides = fixed.clone();
        overrides.extend(drawn);
        points.push((overrides, assignment));
    }
    sweep::from_points(spec_path, dims.iter().map(Dimension::record).collect(), &fixed, points, checkpoints)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::overrides::{SweepArg, parse_sweep};
    use crate::spec::sample;
    use crate::spec::schema::Validator;

    fn dims(args: &[&str]) -> Vec<Dimension> {
        args.iter()
            .map(|a| match sample::parse(a).unwrap() {
                Some(r) => Dimension::Ranged(r),
                None => match parse_sweep(a, &Validator::new()).unwrap() {
                    SweepArg::Axis(ax) => Dimension::List(ax),
                    SweepArg::Fixed(_) => panic!("{a} is fixed"),
                },
            })
            .collect()
    }

    fn draws(args: &[&str], n: usize, seed: u64) -> Vec<Vec<String>> {
        let ds = dims(args);
        let mut rng = SplitMix64::new(seed);
        (0..n).map(|_| ds.iter().map(|d| d.draw(&mut rng).canonical()).collect()).collect()
    }

    #[test]
    fn numbers_keep_four_digits_within_bounds() {
        assert_eq!(number_text(3.1622776e-5, 1e-6, 1e-4), "3.162e-5");
        assert_eq!(number_text(0.61803398, 0.0, 1.0), "0.618");
        assert_eq!(number_text(2.00001, 1.0, 3.0), "2.0");
        assert_eq!(number_text(9.99996e-5, 1e-6, 1e-4), "1e-4");
        assert_eq!(number_text(12345.6, 0.0, 1e5), "1.235e4");
    }

    #[test]
    fn same_seed_same_draws_and_ranges_respected() {
        let args = ["lr=loguniform(1e-6,1e-4)", "temperature=uniform(0.5,1.5)", "seed=range(0,3)", "group_size=[4,8]"];
        let a = draws(&args, 200, 7);
        assert_eq!(a, draws(&args, 200, 7));
        assert_ne!(a, draws(&args, 200, 8));
        let mut decades = [0usize; 2];
        for d in &a {
            let lr: f64 = d[0].split_once('=').unwrap().1.parse().unwrap();
            assert!((1e-6..=1e-4).contains(&lr), "{lr}");
            decades[usize::from(lr >= 1e-5)] += 1;
            let t: f64 = d[1].split_once('=').unwrap().1.parse().unwrap();
            assert!((0.5..=1.5).contains(&t), "{t}");
            assert!(["seed=0", "seed=1", "seed=2"].contains(&d[2].as_str()), "{}", d[2]);
            assert!(["grpo.group_size=4", "grpo.group_size=8"].contains(&d[3].as_str()));
        }
        // Log scale: each decade gets about half the draws (a linear scale would put ~9% below 1e-5).
        assert!(decades[0] > 70 && decades[1] > 70, "{decades:?}");
        let seeds: BTreeSet<&str> = a.iter().map(|d| d[2].as_str()).collect();
        assert_eq!(seeds.len(), 3);
    }
}
