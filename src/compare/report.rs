//! [`Report`]: everything `rlx compare` says about a set of runs, computed once; the table, CSV,
//! JSON, HTML and PNG renderers only lay it out.

use std::collections::{BTreeMap, BTreeSet};

use serde::Serialize;

use super::arms::{self, Arm, Point, Shown};
use super::configdiff;
use super::load::Run;
use super::select::{StepSel, series};
use crate::runlog::EvalSampleRecord;
use super::paired::{self, PassAtK, Paired, Side};
use super::category::{self, ArmCategories};
use super::pooled::{self, FormatSplit, PoolOpts, PooledWithin};
use super::stats::{self, SeedMean, Welch};
use super::{Error, metric};
use crate::runlog::metrics::{eval as eval_names, time, train};


/// What to compare and how.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// Metrics to report (`eval/pass@1`, `train/reward_mean`, ...); the first decides. Empty:
    /// [`metric::defaults`].
    pub metrics: Vec<String>,
    /// Compare at this step instead of the last step common to the finished runs.
    pub at: Option<StepSel>,
    /// Within-run paired test between these two eval steps (`-1,last`).
    pub steps: Option<(StepSel, StepSel)>,
    /// The reference arm: an arm label, a run number (`#2` or `2`) or a run id (or its prefix).
    pub baseline: Option<String>,
    /// Row order: `run`, `status`, `steps`, `wall`, `tokens`, or a metric (best first).
    pub sort: Option<String>,
    /// Bootstrap (and Monte Carlo sign-flip) resamples.
    pub resamples: usize,
    /// Their RNG seed.
    pub seed: u64,
    /// An equivalence margin (the metric's units: 0.05 is 5 pp for a rate): each paired
    /// comparison also tests equivalence within it (two one-sided tests).
    pub margin: Option<f64>,
}

impl Default for Options {
    fn default() -> Self {
        Options { metrics: vec![], at: None, steps: None, baseline: None, sort: None, resamples: 10_000, seed: 0, margin: None }
    }
}

/// A value at a step.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct AtStep {
    /// The step.
    pub step: i64,
    /// The value.
    pub value: f64,
}

/// One metric of one run.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct MetricValues {
    /// The last value.
    #[serde(rename = "final")]
    pub last: Option<AtStep>,
    /// The best value (highest, or lowest for a cost such as a loss or a time) and its step.
    pub best: Option<AtStep>,
    /// The value at the decision step ([`Decision`]).
    pub at: Option<AtStep>,
}

/// The step at which a metric is compared across runs.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Decision {
    /// The metric.
    pub metric: String,
    /// The step; `None`: each run's last value.
    pub step: Option<i64>,
    /// Why this step, for the report.
    pub rule: String,
    /// Whether higher is better.
    pub higher_is_better: bool,
}

/// A run's best evaluation and the checkpoint saved there.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct BestCheckpoint {
    /// The eval metric.
    pub metric: String,
    /// Its best step and value.
    pub best: AtStep,
    /// The checkpoint saved at that step (its name), if any.
    pub checkpoint: Option<String>,
    /// Its state reference, if any.
    pub state_path: Option<String>,
}

/// One row of the runs table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct RunRow {
    /// 1-based number, as the tables show it (`#1`).
    pub index: usize,
    /// The run id.
    pub id: String,
    /// The directory.
    pub path: String,
    /// The arm's label.
    pub arm: String,
    /// The seed.
    pub seed: Option<String>,
    /// `finished`, `running`, `failed` or `interrupted`.
    pub status: String,
    /// Why it ended, for failed and interrupted runs.
    pub reason: Option<String>,
    /// Training steps done.
    pub steps_done: u32,
    /// Training steps asked for.
    pub max_steps: u32,
    /// The differing config keys' values.
    pub config: BTreeMap<String, String>,
    /// Each metric.
    pub metrics: BTreeMap<String, MetricValues>,
    /// Wall time in seconds: Σ `time/step_s` + Σ `time/eval_s` (excludes pauses between
    /// resumes and set-up).
    pub wall_s: Option<f64>,
    /// Completion tokens sampled in training: Σ `train/completion_tokens`.
    pub tokens: Option<f64>,
    /// Best evaluation and its checkpoint.
    pub best_checkpoint: Option<BestCheckpoint>,
}

/// One metric of one arm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ArmValue {
    /// The metric.
    pub metric: String,
    /// Mean and 95% t interval over the seeds that have a value at the decision step.
    pub stat: Option<SeedMean>,
}

/// One row of the arms table.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct ArmRow {
    /// The label.
    pub label: String,
    /// The differing keys and the arm's values of them, as shown (the legend of a letter).
    pub settings: Vec<(String, String)>,
    /// Its runs (numbers).
    pub runs: Vec<usize>,
    /// Their seeds.
    pub seeds: Vec<String>,
    /// Each metric at its decision step.
    pub values: Vec<ArmValue>,
    /// Whether it is the best arm on the deciding metric.
    pub best: bool,
}

/// An arm against the reference arm.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Comparison {
    /// The arm (A).
    pub arm: String,
    /// The reference arm (B).
    pub baseline: String,
    /// The deciding metric.
    pub metric: String,
    /// Recipe level: Welch's t over the seeds' decision values (`None` with fewer than 2 seeds
    /// per arm).
    pub recipe: Option<Welch>,
    /// Seeds of A and B with a decision value.
    pub seeds: (usize, usize),
    /// The eval step paired on (`None`: each run's last eval).
    pub eval_step: Option<i64>,
    /// Checkpoint level: paired on shared eval problems.
    pub paired: Option<Paired>,
    /// Greedy pass@1 at the same eval steps, paired on problems (`None` without greedy records).
    pub greedy: Option<Paired>,
    /// The paired p adjusted for the arms compared against the same baseline (Holm), when more
    /// than one arm is: the raw p of one comparison among many is not its error rate.
    pub holm_p: Option<f64>,
    /// Greedy's p adjusted the same way (a family of its own).
    pub greedy_holm_p: Option<f64>,
    /// Arms compared against the baseline (the size of Holm's family).
    pub family: usize,
    /// Format rate and pass@1 given format, the baseline arm (from) against this arm (to).
    pub format: Vec<FormatSplit>,
    /// Plain-words reading of both.
    pub verdict: String,
}

/// One run between two of its eval steps.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Within {
    /// The run's number.
    pub run: usize,
    /// The earlier step (B).
    pub from: Option<i64>,
    /// The later step (A).
    pub to: Option<i64>,
    /// Δ = later − earlier on the shared problems.
    pub paired: Option<Paired>,
    /// Greedy pass@1 between the same steps (exact McNemar: one sample per problem); `None`
    /// without greedy records at both.
    pub greedy: Option<Paired>,
    /// Why there is no test, when there is none.
    pub note: Option<String>,
    /// Format rate and pass@1 given format at both steps, per protocol.
    pub format: Vec<FormatSplit>,
}

/// pass@k for k = 1..n of one run, at its first evaluation (the baseline) and at the eval step
/// compared: sharpening (pass@1 up, pass@n flat or down) shows only side by side.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct PassAtKRow {
    /// The run's number.
    pub run: usize,
    /// The eval step.
    pub step: i64,
    /// k = 1..n.
    pub values: Vec<PassAtK>,
    /// The run's first eval step (−1: the baseline), when it is not `step`.
    pub base_step: Option<i64>,
    /// pass@k there, k = 1..n.
    pub base: Vec<PassAtK>,
    /// Greedy pass@1 at `step` (the greedy protocol, [`Run::greedy`]), when recorded.
    pub greedy: Option<f64>,
    /// Greedy pass@1 at `base_step`, when recorded.
    pub base_greedy: Option<f64>,
}

/// One eval source of one run (`eval/<source>/pass@k`, written when a spec has two or more).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SourceRow {
    /// The run's number.
    pub run: usize,
    /// The source's label.
    pub source: String,
    /// Its problems (`eval/<source>/problems`) at the compared step.
    pub problems: Option<f64>,
    /// Each k: pass@k at the run's first eval and at the compared step.
    pub values: Vec<SourceValue>,
}

/// pass@k of one source at the first eval and at the compared step.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct SourceValue {
    /// k.
    pub k: u32,
    /// At the run's first eval.
    pub first: Option<AtStep>,
    /// At the compared eval step (the eval decision step, else the last).
    pub at: Option<AtStep>,
}

/// A diagnostic that fired in a run (`events.jsonl`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct DiagnosticRow {
    /// The run's number.
    pub run: usize,
    /// The signal.
    pub signal: String,
    /// The step it fired at.
    pub step: i64,
    /// `warn` or `stop`.
    pub action: String,
    /// What was seen.
    pub evidence: String,
    /// What to do.
    pub remedy: String,
    /// Where to look, when the signal names some.
    pub leads: Vec<String>,
}

/// A problem among the largest drops of a comparison, with the completions on both sides
/// (`eval_rollouts.jsonl`) for the HTML report to show.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Regression {
    /// The problem.
    pub problem_id: String,
    /// Its anchor in the HTML report.
    pub anchor: String,
    /// Where it dropped (`#1 step -1 → 9`, `` `B` − `A` at eval step 9 ``).
    pub contexts: Vec<String>,
    /// Each side's completions: a label (`#1 step -1`) and what was recorded (empty when that
    /// evaluation kept none of this problem's completions).
    pub sides: Vec<(String, Vec<EvalSampleRecord>)>,
}

/// Curves of one metric for the charts.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Curves {
    /// The metric.
    pub metric: String,
    /// One entry per arm: its label, its runs' `(step, y)` and `(wall minutes, y)` series
    /// (labelled), and the aggregates.
    pub arms: Vec<ArmCurves>,
}

/// One arm's curves of one metric.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ArmCurves {
    /// The arm.
    pub label: String,
    /// `(run label, points by step)`.
    pub by_step: Vec<(String, Vec<(f64, f64)>)>,
    /// `(run label, points by wall minutes)`.
    pub by_wall: Vec<(String, Vec<(f64, f64)>)>,
    /// Mean and band by step.
    pub agg_step: Vec<Point>,
    /// Mean and band by wall minutes.
    pub agg_wall: Vec<Point>,
}

/// Everything the report says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Report {
    /// The config keys whose values differ between runs (files with the same content at
    /// different paths do not).
    pub differing: Vec<String>,
    /// Whether the arm labels are letters (several keys differ), explained by a legend.
    pub lettered: bool,
    /// The metrics, deciding one first.
    pub metrics: Vec<String>,
    /// Where each metric is compared.
    pub decisions: Vec<Decision>,
    /// One row per run.
    pub runs: Vec<RunRow>,
    /// One row per arm.
    pub arms: Vec<ArmRow>,
    /// Each arm against the reference arm.
    pub comparisons: Vec<Comparison>,
    /// Within-run tests.
    pub within: Vec<Within>,
    /// Within-run tests of each arm's seeds pooled per problem.
    pub pooled: Vec<PooledWithin>,
    /// pass@1 by problem category for each arm between the same steps, when the eval records
    /// name categories.
    pub categories: Vec<ArmCategories>,
    /// pass@k for k = 1..n, when some evaluation drew more than one sample per problem.
    pub pass_at_k: Vec<PassAtKRow>,
    /// Per eval source pass@k, for runs with two or more sources.
    pub sources: Vec<SourceRow>,
    /// Diagnostics that fired, per run.
    pub diagnostics: Vec<DiagnosticRow>,
    /// Everything that limits what the numbers mean.
    pub warnings: Vec<String>,
    /// The whole resolved config (flattened), for a one-run report; empty otherwise (the
    /// runs table holds the keys that differ).
    pub config: BTreeMap<String, String>,
    /// Eval setting summary: problems, samples per problem, temperature (from the first run).
    pub eval_summary: Option<String>,
    /// Bootstrap resamples and seed used.
    pub resamples: usize,
    /// RNG seed.
    pub seed: u64,
    /// Chart data (not in the JSON: it is the metrics files again).
    #[serde(skip)]
    pub curves: Vec<Curves>,
    /// How the differing values are shown (paths below their common directory); the JSON has
    /// the values in full.
    #[serde(skip)]
    pub shown: Shown,
    /// The largest drops with their completions, for the HTML report.
    #[serde(skip)]
    pub regressions: Vec<Regression>,
}


/// Wall-clock seconds at the end of each metrics line: a running sum of `time/step_s` and
/// `time/eval_s`.
fn wall_clock(run: &Run) -> BTreeMap<i64, f64> {
    let mut t = 0.0;
    let mut out = BTreeMap::new();
    for l in &run.metrics {
        t += l.get(time::STEP_S).filter(|x| x.is_finite()).unwrap_or(0.0) + l.get(time::EVAL_S).filter(|x| x.is_finite()).unwrap_or(0.0);
        out.insert(l.step, t);
    }
    out
}

fn sum_of(run: &Run, names: &[&str]) -> Option<f64> {
    let mut any = false;
    let mut s = 0.0;
    for l in &run.metrics {
        for n in names {
            if let Some(x) = l.get(n).filter(|x| x.is_finite()) {
                any = true;
                s += x;
            }
        }
    }
    any.then_some(s)
}

/// Where metric `m` is compared (see [`Decision`]).
fn decide(runs: &[Run], m: &str, at: Option<StepSel>) -> Decision {
    let higher = metric::higher_is_better(m);
    let with: Vec<&Run> = runs.iter().filter(|r| !series(r, m).is_empty()).collect();
    let pool: Vec<&Run> = if with.iter().any(|r| r.finished()) { with.iter().copied().filter(|r| r.finished()).collect() } else { with.clone() };
    let common = |pick_max: bool| -> Option<i64> {
        let mut it = pool.iter().map(|r| series(r, m).into_iter().map(|p| p.0).collect::<BTreeSet<i64>>());
        let first = it.next()?;
        let common = it.fold(first, |acc, s| acc.intersection(&s).copied().collect());
        if pick_max { common.last().copied() } else { common.first().copied() }
    };
    let (step, rule) = match at {
        Some(StepSel::Step(s)) => (Some(s), format!("step {s} (--at)")),
        Some(StepSel::Last) => (None, "each run's last value (--at last)".into()),
        Some(StepSel::First) => match common(false) {
            Some(s) => (Some(s), format!("step {s}, the first step common to {}", pool_name(&pool, runs))),
            None => (None, "each run's last value (no step is common to all runs)".into()),
        },
        None => match common(true) {
            Some(s) => (Some(s), format!("step {s}, the last step common to {}", pool_name(&pool, runs))),
            None => (None, "each run's last value (no step is common to all runs)".into()),
        },
    };
    Decision { metric: m.to_string(), step, rule, higher_is_better: higher }
}

fn pool_name(pool: &[&Run], runs: &[Run]) -> &'static str {
    if pool.iter().all(|r| r.finished()) && pool.len() < runs.len() { "the finished runs" } else { "all runs" }
}

fn value_at(run: &Run, d: &Decision) -> Option<AtStep> {
    let s = series(run, &d.metric);
    match d.step {
        Some(step) => s.iter().find(|p| p.0 == step).map(|&(step, value)| AtStep { step, value }),
        None => s.last().map(|&(step, value)| AtStep { step, value }),
    }
}

fn best_of(s: &[(i64, f64)], higher: bool) -> Option<AtStep> {
    let mut best: Option<(i64, f64)> = None;
    for &(st, v) in s {
        let better = match best {
            None => true,
            Some((_, b)) => if higher { v > b } else { v < b },
        };
        if better {
            best = Some((st, v));
        }
    }
    best.map(|(step, value)| AtStep { step, value })
}

/// Builds the report.
///
/// # Errors
/// [`Error::NoRuns`] for no runs; [`Error::UnknownMetric`] for a metric no run has;
/// [`Error::UnknownBaseline`]; [`Error::UnknownSort`].
pub(crate) fn build(mut runs: Vec<Run>, opts: &Options) -> Result<Report, Error> {
    if runs.is_empty() {
        return Err(Error::NoRuns { given: "the list given".into() });
    }
    let known: BTreeSet<String> = runs.iter().flat_map(|r| r.metrics.iter().flat_map(|l| l.values.keys().cloned())).collect();
    let metrics: Vec<String> = if opts.metrics.is_empty() { metric::defaults(&known) } else { opts.metrics.clone() };
    for m in &metrics {
        if !known.contains(m) {
            return Err(Error::UnknownMetric { metric: m.clone(), suggestion: metric::suggest(m, &known), known: known.len() });
        }
    }
    let first_id = runs[0].id.clone();
    let decisions: Vec<Decision> = metrics.iter().map(|m| decide(&runs, m, opts.at)).collect();
    if let Some(key) = &opts.sort {
        sort_runs(&mut runs, key, decisions.iter().find(|d| &d.metric == key))?;
    }
    // A file named by a different path with the same bytes (two clones of one repository) is
    // the same experiment.
    configdiff::unify_by_content(runs.iter_mut().map(|r| (&mut r.config, &r.hashes)));
    let differing: Vec<String> = configdiff::differing(runs.iter().map(|r| &r.config));
    let shown = shown_values(&runs, &differing);
    let (groups, lettered) = arms::group(&runs, &differing, &shown);
    let eval = eval_decision(&runs, &decisions, opts.at);
    let cx = Ctx { runs: &runs, decisions: &decisions, differing: &differing, groups: &groups, eval: eval.as_ref(), opts };
    let base = match &opts.baseline {
        Some(b) => find_baseline(b, &runs, &groups)?,
        None => cx.arm_of(runs.iter().position(|r| r.id == first_id).unwrap_or(0)),
    };
    let comparisons = comparisons(&cx, base);
    let within = within(&cx);
    let (pooled, categories) = if opts.steps.is_none() && runs.len() > 4 {
        (vec![], vec![])
    } else {
        let steps = opts.steps.unwrap_or((StepSel::First, StepSel::Last));
        (pooled::pooled(&runs, &groups, PoolOpts { steps, k: cx.k(), resamples: opts.resamples, seed: opts.seed, margin: opts.margin }), category::by_arm(&runs, &groups, steps))
    };
    let mut warnings = vec![];
    warn(&cx, &comparisons, &within, &mut warnings);
    let regressions = regressions(&cx, &comparisons, &within);
    Ok(Report {
        lettered,
        sources: source_rows(&cx),
        diagnostics: runs.iter().enumerate().flat_map(|(i, r)| r.diagnostics.iter().map(move |f| DiagnosticRow { run: i + 1, signal: f.signal.clone(), step: f.step, action: f.action.clone(), evidence: f.evidence.clone(), remedy: f.remedy.clone(), leads: f.leads.clone() })).collect(),
        shown,
        regressions,
        config: if runs.len() == 1 { runs[0].config.clone() } else { BTreeMap::new() },
        runs: run_rows(&cx),
        arms: arm_rows(&cx),
        pass_at_k: pass_at_k_rows(&cx),
        curves: decisions.iter().map(|d| curves(&runs, &groups, &d.metric)).collect(),
        eval_summary: eval_summary(&runs, eval.as_ref()),
        comparisons,
        within,
        pooled,
        categories,
        warnings,
        resamples: opts.resamples,
        seed: opts.seed,
        differing,
        metrics,
        decisions,
    })
}

/// What the parts of a report are built from.
struct Ctx<'a> {
    runs: &'a [Run],
    decisions: &'a [Decision],
    differing: &'a [String],
    groups: &'a [Arm],
    /// The eval metric whose step the paired tests use.
    eval: Option<&'a Decision>,
    opts: &'a Options,
}

impl Ctx<'_> {
    fn arm_of(&self, run: usize) -> usize {
        self.groups.iter().position(|a| a.runs.contains(&run)).expect("every run is in an arm")
    }

    /// The deciding metric.
    fn primary(&self) -> Option<&Decision> {
        self.decisions.first()
    }

    /// The k of the paired tests: the deciding metric's when it is a pass@k.
    fn k(&self) -> u32 {
        self.primary().and_then(|d| eval_names::parse_pass_at(&d.metric)).unwrap_or(1)
    }

    /// An arm's values of `d` at its deciding step, one per run that has one.
    fn decision_values(&self, arm: &Arm, d: &Decision) -> Vec<f64> {
        arm.runs.iter().filter_map(|&i| value_at(&self.runs[i], d)).map(|a| a.value).collect()
    }
}

/// One row per run: status, metrics, wall clock, tokens, best checkpoint.
fn run_rows(cx: &Ctx<'_>) -> Vec<RunRow> {
    let mut rows = vec![];
    for (i, r) in cx.runs.iter().enumerate() {
        let clock = wall_clock(r);
        let mut mv = BTreeMap::new();
        for d in cx.decisions {
            let s = series(r, &d.metric);
            mv.insert(
                d.metric.clone(),
                MetricValues { last: s.last().map(|&(step, value)| AtStep { step, value }), best: best_of(&s, d.higher_is_better), at: value_at(r, d) },
            );
        }
        let best_checkpoint = cx.eval.and_then(|d| {
            let best = best_of(&series(r, &d.metric), true)?;
            let ck = r.checkpoints.iter().rev().find(|c| i64::from(c.step) == best.step);
            Some(BestCheckpoint { metric: d.metric.clone(), best, checkpoint: ck.map(|c| c.name.clone()), state_path: ck.and_then(|c| c.state_path.clone()) })
        });
        rows.push(RunRow {
            index: i + 1,
            id: r.id.clone(),
            path: r.path.display().to_string(),
            arm: cx.groups[cx.arm_of(i)].label.clone(),
            seed: r.seed().map(str::to_string),
            status: r.state().to_string(),
            reason: r.status.reason.clone(),
            steps_done: r.status.steps_done,
            max_steps: r.status.max_steps,
            config: arms::values(r, cx.differing),
            metrics: mv,
            wall_s: clock.values().last().copied().filter(|_| sum_of(r, &[time::STEP_S, time::EVAL_S]).is_some()),
            tokens: sum_of(r, &[train::COMPLETION_TOKENS]),
            best_checkpoint,
        });
    }
    rows
}

/// One row per arm: the mean over seeds of each metric; ★ for a strict winner.
fn arm_rows(cx: &Ctx<'_>) -> Vec<ArmRow> {
    let mut arm_rows: Vec<ArmRow> = cx
        .groups
        .iter()
        .map(|a| ArmRow {
            label: a.label.clone(),
            settings: a.settings.clone(),
            runs: a.runs.iter().map(|i| i + 1).collect(),
            seeds: arms::seeds(cx.runs, a),
            values: cx
                .decisions
                .iter()
                .map(|d| {
                    let xs = cx.decision_values(a, d);
                    ArmValue { metric: d.metric.clone(), stat: (!xs.is_empty()).then(|| stats::seed_mean(&xs)) }
                })
                .collect(),
            best: false,
        })
        .collect();
    if let Some(d) = cx.primary()
        && arm_rows.len() > 1
    {
        let key = |a: &ArmRow| a.values[0].stat.map(|s| if d.higher_is_better { s.mean } else { -s.mean });
        // ★ only for a strict winner: a tie has no best arm.
        let scored: Vec<(usize, f64)> = (0..arm_rows.len()).filter_map(|i| key(&arm_rows[i]).map(|k| (i, k))).collect();
        let top = scored.iter().map(|&(_, k)| k).fold(f64::NEG_INFINITY, f64::max);
        let winners: Vec<usize> = scored.iter().filter(|&&(_, k)| k == top).map(|&(i, _)| i).collect();
        if let [best] = winners.as_slice() {
            arm_rows[*best].best = true;
        }
    }
    arm_rows
}

/// Each arm against the reference arm `base`: over seeds (Welch) and paired on problems.
fn comparisons(cx: &Ctx<'_>, base: usize) -> Vec<Comparison> {
    let Some(d) = cx.primary() else { return vec![] };
    let (runs, groups) = (cx.runs, cx.groups);
    let mut out = vec![];
    let margin = cx.opts.margin;
    for (ai, arm) in groups.iter().enumerate() {
        if ai == base {
            continue;
        }
        let (xa, xb) = (cx.decision_values(arm, d), cx.decision_values(&groups[base], d));
        let recipe = stats::welch(&xa, &xb);
        let side = |a: &Arm, greedy: bool| -> Side { Side { label: a.label.clone(), runs: a.runs.iter().filter_map(|&i| eval_step_of(&runs[i], cx.eval).map(|s| (&runs[i], s))).collect(), greedy } };
        let (sa, sb) = (side(arm, false), side(&groups[base], false));
        let paired = if sa.runs.is_empty() || sb.runs.is_empty() { None } else { paired::compare(&sa, &sb, cx.k(), cx.opts.resamples, cx.opts.seed, margin) };
        let (ga, gb) = (side(arm, true), side(&groups[base], true));
        let two_protocols = ga.runs.iter().chain(&gb.runs).any(|(r, _)| !r.greedy_evals.is_empty());
        let greedy = if two_protocols { paired::compare(&ga, &gb, 1, cx.opts.resamples, cx.opts.seed, margin) } else { None };
        out.push(Comparison {
            arm: arm.label.clone(),
            baseline: groups[base].label.clone(),
            metric: d.metric.clone(),
            recipe,
            seeds: (xa.len(), xb.len()),
            eval_step: cx.eval.and_then(|e| e.step),
            format: pooled::format_splits(&sb.runs, &sa.runs),
            paired,
            greedy,
            holm_p: None,
            greedy_holm_p: None,
            family: 0,
            verdict: String::new(),
        });
    }
    adjust(&mut out);
    for c in &mut out {
        c.verdict = verdict(c, d);
    }
    out
}

/// Holm's adjustment over the arms compared against the baseline, per protocol, when there is
/// more than one.
fn adjust(out: &mut [Comparison]) {
    let family = out.len();
    for c in out.iter_mut() {
        c.family = family;
    }
    if family < 2 {
        return;
    }
    for greedy in [false, true] {
        let pick = |c: &Comparison| if greedy { c.greedy.as_ref() } else { c.paired.as_ref() }.map(Paired::p);
        let idx: Vec<usize> = (0..family).filter(|&i| pick(&out[i]).is_some()).collect();
        let ps: Vec<f64> = idx.iter().map(|&i| pick(&out[i]).expect("filtered")).collect();
        for (&i, h) in idx.iter().zip(stats::holm(&ps)) {
            if greedy { out[i].greedy_holm_p = Some(h) } else { out[i].holm_p = Some(h) }
        }
    }
}

/// Within each run: the eval between two steps, paired on problems (asked for with `--steps`,
/// or by default for up to four runs).
fn within(cx: &Ctx<'_>) -> Vec<Within> {
    let opts = cx.opts;
    if opts.steps.is_none() && cx.runs.len() > 4 {
        return vec![];
    }
    let (from, to) = opts.steps.unwrap_or((StepSel::First, StepSel::Last));
    let mut within = vec![];
    for (i, r) in cx.runs.iter().enumerate() {
        let steps: Vec<i64> = r.evals.keys().copied().collect();
        let (f, t) = (from.pick(&steps), to.pick(&steps));
        let mut w = Within { run: i + 1, from: f, to: t, paired: None, greedy: None, note: None, format: vec![] };
        match (f, t) {
            _ if steps.is_empty() => w.note = Some("no eval results".into()),
            (None, _) => w.note = Some(format!("no eval at step {from} (eval steps: {})", list(&steps))),
            (_, None) => w.note = Some(format!("no eval at step {to} (eval steps: {})", list(&steps))),
            (Some(f), Some(t)) if f == t => w.note = Some(format!("only one eval step ({f})")),
            (Some(f), Some(t)) => {
                let a = Side { label: format!("step {t}"), runs: vec![(r, t)], greedy: false };
                let b = Side { label: format!("step {f}"), runs: vec![(r, f)], greedy: false };
                w.paired = paired::compare(&a, &b, cx.k(), opts.resamples, opts.seed, opts.margin);
                // A run whose main eval is greedy has one protocol: its main test is greedy's.
                if !r.greedy_evals.is_empty() {
                    w.greedy = paired::compare(&Side { greedy: true, ..a }, &Side { greedy: true, ..b }, 1, opts.resamples, opts.seed, opts.margin);
                }
                w.format = pooled::format_splits(&[(r, f)], &[(r, t)]);
                if w.paired.is_none() {
                    w.note = Some("the two evaluations share no problems".into());
                }
            }
        }
        within.push(w);
    }
    within
}

/// pass@k for k = 1..n at each run's paired eval step, when some eval drew more than one sample.
fn pass_at_k_rows(cx: &Ctx<'_>) -> Vec<PassAtKRow> {
    if !cx.runs.iter().any(|r| r.evals.values().flat_map(|m| m.values()).any(|o| o.n > 1) || !r.greedy_evals.is_empty()) {
        return vec![];
    }
    let greedy_at = |r: &Run, step: i64| {
        let graded: Vec<f64> = r.greedy().get(&step)?.values().filter(|o| o.n > 0).map(|o| f64::from(o.correct) / f64::from(o.n)).collect();
        (!graded.is_empty()).then(|| graded.iter().sum::<f64>() / graded.len() as f64)
    };
    cx.runs
        .iter()
        .enumerate()
        .filter_map(|(i, r)| {
            let step = eval_step_of(r, cx.eval)?;
            let base_step = r.evals.keys().next().copied().filter(|&b| b != step);
            let base = base_step.map(|b| paired::pass_at_ks(r, b)).unwrap_or_default();
            let base_greedy = base_step.and_then(|b| greedy_at(r, b));
            Some(PassAtKRow { run: i + 1, step, values: paired::pass_at_ks(r, step), base_step, base, greedy: greedy_at(r, step), base_greedy })
        })
        .collect()
}

/// How each differing key's values are shown ([`configdiff::shown`] over every run's value).
fn shown_values(runs: &[Run], differing: &[String]) -> Shown {
    differing
        .iter()
        .map(|k| {
            let values: Vec<&str> = runs.iter().filter_map(|r| r.config.get(k).map(String::as_str)).collect();
            let shown = configdiff::shown(&values);
            (k.clone(), values.iter().map(|v| (*v).to_string()).zip(shown).collect())
        })
        .collect()
}

/// Per eval source: pass@k at each run's first eval and at the compared eval step.
fn source_rows(cx: &Ctx<'_>) -> Vec<SourceRow> {
    let mut rows = vec![];
    for (i, r) in cx.runs.iter().enumerate() {
        let mut sources: BTreeMap<&str, BTreeSet<u32>> = BTreeMap::new();
        for l in &r.metrics {
            for name in l.values.keys() {
                if let Some((src, k)) = eval_names::parse_source_pass_at(name) {
                    sources.entry(src).or_default().insert(k);
                }
            }
        }
        let at = |m: &str| -> Option<AtStep> {
            let s = series(r, m);
            let pick = match cx.eval.and_then(|d| d.step) {
                Some(step) => s.iter().find(|p| p.0 == step),
                None => s.last(),
            };
            pick.map(|&(step, value)| AtStep { step, value })
        };
        for (src, ks) in sources {
            let values = ks
                .into_iter()
                .map(|k| {
                    let m = eval_names::source_pass_at(src, k);
                    let first = series(r, &m).first().map(|&(step, value)| AtStep { step, value });
                    SourceValue { k, first, at: at(&m) }
                })
                .collect();
            rows.push(SourceRow { run: i + 1, source: src.to_string(), problems: at(&eval_names::source_problems(src)).map(|a| a.value), values });
        }
    }
    rows
}

/// The largest drops (three per comparison and per within-run test) with each side's recorded
/// completions; none when no run recorded eval completions.
fn regressions(cx: &Ctx<'_>, comparisons: &[Comparison], within: &[Within]) -> Vec<Regression> {
    if cx.runs.iter().all(|r| r.eval_samples.is_empty()) {
        return vec![];
    }
    /// A dropping problem: where it dropped, and the (run, step) evaluations to show.
    struct Found {
        id: String,
        contexts: Vec<String>,
        sides: Vec<(usize, i64)>,
    }
    let mut found: Vec<Found> = vec![];
    let mut add = |id: &str, context: String, sides: &[(usize, i64)]| {
        let pos = found.iter().position(|f| f.id == id).unwrap_or_else(|| {
            found.push(Found { id: id.to_string(), contexts: vec![], sides: vec![] });
            found.len() - 1
        });
        let f = &mut found[pos];
        f.contexts.push(context);
        for s in sides {
            if !f.sides.contains(s) {
                f.sides.push(*s);
            }
        }
    };
    for w in within {
        if let (Some(p), Some(from), Some(to)) = (&w.paired, w.from, w.to) {
            for d in p.largest_drops.iter().take(3) {
                add(&d.problem_id, format!("#{} step {from} → {to}", w.run), &[(w.run - 1, from), (w.run - 1, to)]);
            }
        }
    }
    for c in comparisons {
        let Some(p) = &c.paired else { continue };
        let members = |label: &str| -> Vec<(usize, i64)> {
            cx.groups.iter().filter(|g| g.label == label).flat_map(|g| g.runs.iter().filter_map(|&i| eval_step_of(&cx.runs[i], cx.eval).map(|s| (i, s)))).collect()
        };
        let sides: Vec<(usize, i64)> = members(&c.baseline).into_iter().chain(members(&c.arm)).collect();
        let at = c.eval_step.map_or("each run's last eval".into(), |s| format!("eval step {s}"));
        for d in p.largest_drops.iter().take(3) {
            add(&d.problem_id, format!("`{}` − `{}` at {at}", c.arm, c.baseline), &sides);
        }
    }
    found
        .into_iter()
        .enumerate()
        .map(|(n, Found { id: problem_id, contexts, sides })| {
            let anchor = format!("drop-{n}-{}", problem_id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect::<String>());
            let sides = sides
                .into_iter()
                .map(|(i, step)| {
                    let arm = if cx.groups.len() > 1 { format!(" `{}`", cx.groups[cx.arm_of(i)].label) } else { String::new() };
                    let label = format!("#{}{arm} step {}", i + 1, if step < 0 { "-1 (baseline)".to_string() } else { step.to_string() });
                    (label, cx.runs[i].eval_samples.get(&(step, problem_id.clone())).cloned().unwrap_or_default())
                })
                .collect();
            Regression { problem_id, anchor, contexts, sides }
        })
        .collect()
}

/// The eval metric whose step the paired tests use: the deciding metric when it is an eval
/// metric, else `eval/pass@1` (or the first pass@k) when the runs have one.
fn eval_decision(runs: &[Run], decisions: &[Decision], at: Option<StepSel>) -> Option<Decision> {
    if let Some(d) = decisions.first().filter(|d| eval_names::parse_pass_at(&d.metric).is_some()) {
        return Some(d.clone());
    }
    let known: BTreeSet<String> = runs.iter().flat_map(|r| r.metrics.iter().flat_map(|l| l.values.keys().cloned())).collect();
    let m = known.iter().filter(|k| eval_names::parse_pass_at(k).is_some()).min_by_key(|k| eval_names::parse_pass_at(k))?;
    Some(decide(runs, m, at))
}

/// The eval step of `run` that paired tests read: the decision step, or the run's last eval.
fn eval_step_of(run: &Run, d: Option<&Decision>) -> Option<i64> {
    match d.and_then(|d| d.step) {
        Some(s) => run.evals.contains_key(&s).then_some(s),
        None => run.evals.keys().next_back().copied(),
    }
}

fn list(steps: &[i64]) -> String {
    steps.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
}

fn sort_runs(runs: &mut [Run], key: &str, d: Option<&Decision>) -> Result<(), Error> {
    match key {
        "run" | "id" => runs.sort_by(|a, b| a.id.cmp(&b.id)),
        "status" => runs.sort_by_key(|r| r.state()),
        "steps" => runs.sort_by_key(|r| std::cmp::Reverse(r.status.steps_done)),
        "wall" => runs.sort_by(|a, b| wall_clock(a).values().last().partial_cmp(&wall_clock(b).values().last()).unwrap_or(std::cmp::Ordering::Equal)),
        "tokens" => runs.sort_by(|a, b| sum_of(a, &[train::COMPLETION_TOKENS]).partial_cmp(&sum_of(b, &[train::COMPLETION_TOKENS])).unwrap_or(std::cmp::Ordering::Equal)),
        _ => {
            let Some(d) = d else {
                return Err(Error::UnknownSort { given: key.to_string() });
            };
            // Best first; runs without a value last.
            let score = |r: &Run| value_at(r, d).map(|a| if d.higher_is_better { -a.value } else { a.value }).unwrap_or(f64::INFINITY);
            runs.sort_by(|a, b| score(a).total_cmp(&score(b)));
        }
    }
    Ok(())
}

fn find_baseline(given: &str, runs: &[Run], groups: &[Arm]) -> Result<usize, Error> {
    if let Some(i) = groups.iter().position(|a| a.label == given) {
        return Ok(i);
    }
    let number = given.trim_start_matches('#').parse::<usize>().ok().filter(|n| (1..=runs.len()).contains(n));
    let run = number.map(|n| n - 1).or_else(|| runs.iter().position(|r| r.id == given)).or_else(|| {
        let hits: Vec<usize> = (0..runs.len()).filter(|&i| runs[i].id.starts_with(given)).collect();
        (hits.len() == 1).then(|| hits[0])
    });
    match run {
        Some(i) => Ok(groups.iter().position(|a| a.runs.contains(&i)).expect("every run is in an arm")),
        None => Err(Error::UnknownBaseline {
            given: given.to_string(),
            runs: runs.len(),
            arms: groups.iter().map(|a| format!("`{}`", a.label)).collect::<Vec<_>>().join(", "),
        }),
    }
}

/// The reading of one comparison in words: significance on the Holm-adjusted p when several arms
/// were compared; a difference not detected is said so with its interval (it is not evidence of
/// no difference: only an equivalence test within a margin is).
fn verdict(c: &Comparison, d: &Decision) -> String {
    let (a, b) = (&c.arm, &c.baseline);
    let mut out = vec![];
    if let Some(p) = &c.paired {
        let n = p.problems;
        let (pv, how) = match c.holm_p {
            Some(h) => (h, format!("{} p = {}, Holm-adjusted over {} arms p = {}", p.test_name(), metric::p(p.p()), c.family, metric::p(h))),
            None => (p.p(), format!("{}, p = {}", p.test_name(), metric::p(p.p()))),
        };
        let dir = if p.delta() > 0.0 { "better" } else { "worse" };
        out.push(if pv < 0.05 {
            format!("`{a}`'s checkpoints are {dir} than `{b}`'s on these {n} problems ({how})")
        } else {
            format!(
                "no difference detected between `{a}`'s and `{b}`'s checkpoints on these {n} problems ({how}; Δ {}{}, its 95% interval, unadjusted): not evidence that they are the same",
                metric::delta_ci(&c.metric, p.ci().lo, p.ci().hi),
                unit(&c.metric)
            )
        });
        if let Some(t) = &p.tost {
            out.push(tost_text(&c.metric, t));
        }
    }
    match &c.recipe {
        Some(w) if w.ci.lo > 0.0 || w.ci.hi < 0.0 => out.push(format!("over seeds the difference in {} is established (Welch 95% CI excludes 0, p = {})", d.metric, metric::p(w.p))),
        Some(w) => out.push(format!("over seeds a difference in {} is not detected with {} vs {} seeds (Welch 95% CI includes 0, p = {})", d.metric, c.seeds.0, c.seeds.1, metric::p(w.p))),
        None => out.push(format!("recipe level untested: needs ≥ 2 seeds per arm ({} vs {})", c.seeds.0, c.seeds.1)),
    }
    out.join("; ")
}

/// ` pp` after an interval of a rate's differences ([`metric::delta_ci`] leaves the unit out).
pub(crate) fn unit(m: &str) -> &'static str {
    if metric::is_fraction(m) { " pp" } else { "" }
}

/// `equivalent within ±5.0 pp (TOST p = 0.011, 90% CI [−3.1, +2.0] pp)`, or not shown so.
pub(crate) fn tost_text(m: &str, t: &stats::Tost) -> String {
    let ci = format!("{}{}", metric::delta_ci(m, t.ci90.lo, t.ci90.hi), unit(m));
    let within = metric::delta(m, t.margin).replacen('+', "±", 1);
    if t.equivalent {
        format!("equivalent within {within} (TOST: both one-sided t tests reject, p = {}; 90% CI {ci})", metric::p(t.p))
    } else {
        format!("not shown equivalent within {within} (TOST p = {}; 90% CI {ci} reaches past the margin)", metric::p(t.p))
    }
}

fn warn(cx: &Ctx<'_>, comparisons: &[Comparison], within: &[Within], w: &mut Vec<String>) {
    let Ctx { runs, decisions, differing, groups, eval, .. } = *cx;
    let name = |i: usize| format!("#{} `{}`", i + 1, runs[i].id);
    for (i, r) in runs.iter().enumerate() {
        for n in &r.notes {
            w.push(format!("{}: {n}", name(i)));
        }
        if !r.finished() {
            let why = r.status.reason.as_deref().map(|s| format!(": {s}")).unwrap_or_default();
            w.push(format!("{} is {} at step {}/{}{why}; its values are partial", name(i), r.state(), r.status.steps_done, r.status.max_steps));
        }
    }
    let ends: BTreeSet<u32> = runs.iter().map(|r| r.status.steps_done).collect();
    if ends.len() > 1 {
        let each = runs.iter().enumerate().map(|(i, r)| format!("#{} {}", i + 1, r.status.steps_done)).collect::<Vec<_>>().join(", ");
        w.push(format!("runs end at different steps ({each})"));
    }
    for d in decisions {
        let missing: Vec<String> = (0..runs.len()).filter(|&i| series(&runs[i], &d.metric).is_empty()).map(|i| format!("#{}", i + 1)).collect();
        if !missing.is_empty() {
            w.push(format!("`{}` is missing from {}: not comparable there", d.metric, missing.join(", ")));
        }
        if let Some(s) = d.step {
            let lacking: Vec<String> = (0..runs.len()).filter(|&i| !series(&runs[i], &d.metric).is_empty() && value_at(&runs[i], d).is_none()).map(|i| format!("#{}", i + 1)).collect();
            if !lacking.is_empty() {
                w.push(format!("`{}` has no value at step {s} in {}: left out of the arm statistics", d.metric, lacking.join(", ")));
            }
        }
    }
    let eval_keys: Vec<&String> = differing.iter().filter(|k| k.starts_with("eval.") || k.starts_with("data.eval")).collect();
    if !eval_keys.is_empty() {
        w.push(format!(
            "eval settings differ ({}): eval metrics are not directly comparable between those runs",
            eval_keys.iter().map(|k| format!("`{k}`")).collect::<Vec<_>>().join(", ")
        ));
    }
    let fps: BTreeSet<&String> = runs.iter().filter_map(|r| r.eval_fingerprint.as_ref()).collect();
    if fps.len() > 1 {
        w.push(format!("the runs evaluated {} different eval problem sets (provenance fingerprints differ)", fps.len()));
    }
    // Problem sets at the paired step.
    let sets: Vec<(usize, BTreeSet<&String>)> = (0..runs.len())
        .filter_map(|i| eval_step_of(&runs[i], eval).map(|s| (i, runs[i].evals[&s].keys().collect())))
        .collect();
    if sets.len() > 1 && sets.iter().any(|(_, s)| *s != sets[0].1) {
        let each = sets.iter().map(|(i, s)| format!("#{}: {}", i + 1, s.len())).collect::<Vec<_>>().join(", ");
        let shared = sets.iter().skip(1).fold(sets[0].1.clone(), |acc, (_, s)| acc.intersection(s).copied().collect::<BTreeSet<_>>());
        w.push(format!("runs evaluated different problems ({each} problems; {} shared by all): paired tests use only the problems both sides share", shared.len()));
    }
    if groups.len() > 1 {
        for a in groups.iter().filter(|a| a.runs.len() == 1) {
            w.push(format!("arm `{}` has 1 seed: no interval over seeds is possible", a.label));
        }
    }
    let short: usize = comparisons.iter().filter_map(|c| c.paired.as_ref()).map(|p| p.excluded_n_lt_k).chain(within.iter().filter_map(|x| x.paired.as_ref()).map(|p| p.excluded_n_lt_k)).max().unwrap_or(0);
    if short > 0 {
        w.push(format!("{short} problem(s) had fewer graded samples than k (infrastructure failures): left out of the paired tests rather than scored as pass@n"));
    }
    let infra: Vec<String> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| r.metrics.iter().any(|l| l.get(eval_names::INFRA_ERRORS).is_some_and(|x| x > 0.0)))
        .map(|(i, _)| format!("#{}", i + 1))
        .collect();
    if !infra.is_empty() {
        w.push(format!("eval samples lost to sandbox infrastructure errors in {} (left out of n, not scored as failures)", infra.join(", ")));
    }
}

fn eval_summary(runs: &[Run], eval: Option<&Decision>) -> Option<String> {
    let r = runs.iter().find(|r| eval_step_of(r, eval).is_some())?;
    let step = eval_step_of(r, eval)?;
    let outcomes = &r.evals[&step];
    let ns: BTreeSet<u32> = outcomes.values().map(|o| o.n).collect();
    let n = match (ns.first(), ns.last()) {
        (Some(a), Some(b)) if a == b => format!("n={a}"),
        (Some(a), Some(b)) => format!("n={a}..{b}"),
        _ => String::new(),
    };
    let t = r.config.get("eval.temperature").map(|t| format!(", T={t}")).unwrap_or_default();
    Some(format!("{} problems, {n}{t}", outcomes.len()))
}

fn curves(runs: &[Run], groups: &[Arm], m: &str) -> Curves {
    let arms = groups
        .iter()
        .map(|a| {
            let mut by_step = vec![];
            let mut by_wall = vec![];
            for &i in &a.runs {
                let r = &runs[i];
                let s = series(r, m);
                if s.is_empty() {
                    continue;
                }
                let clock = wall_clock(r);
                let label = format!("#{} seed {}", i + 1, r.seed().unwrap_or("?"));
                by_step.push((label.clone(), s.iter().map(|&(st, y)| (st as f64, y)).collect::<Vec<_>>()));
                by_wall.push((label, s.iter().filter_map(|&(st, y)| clock.get(&st).map(|t| (t / 60.0, y))).collect::<Vec<_>>()));
            }
            let agg_step = arms::aggregate(&by_step.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>());
            let agg_wall = arms::aggregate(&by_wall.iter().map(|(_, s)| s.clone()).collect::<Vec<_>>());
            ArmCurves { label: a.label.clone(), by_step, by_wall, agg_step, agg_wall }
        })
        .collect();
    Curves { metric: m.to_string(), arms }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runlog::{MetricsLine, SCHEMA_VERSION, State, Status};

    fn run(id: &str, lr: &str, seed: u32, state: State, pass: &[(i64, f64)]) -> Run {
        let config = [("seed", seed.to_string()), ("optimizer.learning_rate", lr.to_string()), ("name", "t".to_string())].into_iter().map(|(k, v)| (k.to_string(), v)).collect();
        Run {
            id: id.into(),
            path: id.into(),
            status: Status { schema_version: SCHEMA_VERSION, run_id: id.into(), state, steps_done: 0, max_steps: 10, reason: None, pid: None, started_at: String::new(), updated_at: String::new() },
            config,
            metrics: pass.iter().map(|&(s, v)| MetricsLine::new(s, [("eval/pass@1".to_string(), v)].into())).collect(),
            evals: BTreeMap::new(),
            greedy_evals: BTreeMap::new(),
            categories: BTreeMap::new(),
            checkpoints: vec![],
            eval_fingerprint: None,
            hashes: BTreeMap::new(),
            diagnostics: vec![],
            eval_samples: BTreeMap::new(),
            notes: vec![],
        }
    }

    #[test]
    fn the_deciding_step_ignores_runs_that_stopped_early_and_ties_have_no_star() {
        let runs = vec![
            run("a", "1", 0, State::Finished, &[(-1, 0.2), (4, 0.3), (9, 0.5)]),
            run("b", "2", 0, State::Finished, &[(-1, 0.2), (4, 0.4), (9, 0.5)]),
            run("c", "2", 1, State::Failed, &[(-1, 0.2), (4, 0.4)]),
        ];
        let r = build(runs.clone(), &Options::default()).unwrap();
        assert_eq!(r.decisions[0].step, Some(9), "{}", r.decisions[0].rule);
        assert!(r.decisions[0].rule.contains("finished runs"));
        // Arm lr=2 has one value at step 9 (the failed seed has none): 0.5 against 0.5, a tie.
        assert_eq!(r.arms.len(), 2);
        assert!(r.arms.iter().all(|a| !a.best), "a tie has no best arm");
        assert_eq!(r.arms[1].values[0].stat.unwrap().m, 1);
        // --at 4 decides at step 4, where lr=2 (0.4, 0.4) beats lr=1 (0.3).
        let r = build(runs, &Options { at: Some(StepSel::Step(4)), ..Options::default() }).unwrap();
        assert!(r.arms[1].best && !r.arms[0].best);
        assert_eq!(r.arms[1].values[0].stat.unwrap().m, 2);
        assert_eq!(r.comparisons[0].arm, "lr=2");
    }
}
