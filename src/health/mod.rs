//! Run health: the reference workflow's diagnostic signals (reward flat at 0 or 1, format rate
//! falling, reward rising while eval is flat, loss exploding, every group degenerate, sandbox
//! timeouts or infrastructure errors dominating, truncation, sampler/learner divergence) checked
//! over a run's recent steps, with the thresholds of the spec's `diagnostics:` section.
//!
//! [`Monitor`] is fed each step's metrics and rollouts and each eval's metrics, in order, and
//! says which signals fired. The engine feeds it live; `rlx doctor` feeds it a run directory's
//! `metrics.jsonl` and `rollouts.jsonl` afterwards, so both see the same signals (and doctor
//! works on runs older than the signals). [`smoke`] holds the reference's smoke-test
//! expectations, scaled to a run's length.
//!
//! Why signals fire once per episode rather than at every step they hold: a run flat at zero
//! for 200 steps would print 196 identical lines; once the condition is false again the signal
//! re-arms.

pub mod doctor;
mod evals;
mod leads;
mod signals;
pub mod smoke;

use std::collections::{BTreeMap, BTreeSet};

pub use signals::Signal;

use crate::runlog::metrics::eval as eval_names;
use crate::runlog::{EvalResultRecord, EventRecord, RolloutRecord};
use crate::spec::health::{Action, Health};

/// One step's metrics.
#[derive(Debug, Clone)]
pub(crate) struct Point {
    step: i64,
    metrics: BTreeMap<String, f64>,
}

impl Point {
    fn get(&self, name: &str) -> Option<f64> {
        self.metrics.get(name).copied()
    }
}

/// What the monitor has seen.
#[derive(Debug, Default)]
pub(crate) struct History {
    steps: Vec<Point>,
    /// `(step, eval/pass@1)` of each eval, the baseline (−1) first when there is one.
    evals: Vec<(i64, f64)>,
    /// Each eval's metrics, in order (pass@k at every k for coverage).
    eval_metrics: Vec<evals::EvalLine>,
    /// Each problem's greedy pass/fail at the first eval with greedy results, and at the latest.
    greedy_first: Option<evals::Outcomes>,
    greedy_now: Option<evals::Outcomes>,
    leads: leads::Leads,
}

impl History {
    fn last(&self) -> Option<&Point> {
        self.steps.last()
    }
}

/// A signal that fired.
#[derive(Debug, Clone, PartialEq)]
pub struct Firing {
    /// Which.
    pub signal: Signal,
    /// The step after which it fired (−1: the baseline eval).
    pub step: i64,
    /// What was seen, with numbers.
    pub evidence: String,
    /// What the spec says to do: warn or stop.
    pub action: Action,
    /// Problems and rollouts to look at.
    pub leads: Vec<String>,
}

impl Firing {
    /// The warning line: `step 7: reward_flat_zero: <evidence>; remedy: <remedy>`.
    pub fn line(&self) -> String {
        let stop = if self.action == Action::Stop { " (diagnostics action: stop)" } else { "" };
        let leads = if self.leads.is_empty() { String::new() } else { format!("; leads: {}", self.leads.join("; ")) };
        format!("step {}: {}{stop}: {}; remedy: {}{leads}", self.step, self.signal.name(), self.evidence, self.signal.remedy())
    }

    /// Its `events.jsonl` line.
    pub fn record(&self) -> EventRecord {
        EventRecord::Diagnostic {
            signal: self.signal.name().into(),
            step: self.step,
            evidence: self.evidence.clone(),
            remedy: self.signal.remedy().into(),
            action: match self.action {
                Action::Stop => "stop",
                _ => "warn",
            }
            .into(),
            leads: self.leads.clone(),
            time: crate::runlog::now(),
        }
    }
}

/// Checks the signals as a run's steps and evals arrive.
#[derive(Debug)]
pub struct Monitor {
    cfg: Health,
    history: History,
    /// Signals whose condition held at the last check: they do not fire again until it fails.
    holding: BTreeSet<Signal>,
}

impl Monitor {
    /// A monitor with the spec's `diagnostics:` section.
    pub fn new(cfg: Health) -> Monitor {
        Monitor { cfg, history: History::default(), holding: BTreeSet::new() }
    }

    /// After step `step` with its metrics line (an eval's metrics in it are read by
    /// [`Monitor::eval`], which the caller calls after this) and its rollouts.
    pub fn step<'r>(&mut self, step: u32, metrics: &BTreeMap<String, f64>, rollouts: impl IntoIterator<Item = &'r RolloutRecord>) -> Vec<Firing> {
        self.history.steps.push(Point { step: i64::from(step), metrics: metrics.clone() });
        self.history.leads.add(step, rollouts);
        let mut out = vec![];
        for signal in Signal::STEP {
            let evidence = match signal.action(&self.cfg) {
                Action::Off => None,
                _ => signal.check_step(&self.cfg, &self.history),
            };
            self.fire(signal, i64::from(step), evidence.map(|e| (e, vec![])), &mut out);
        }
        out
    }

    /// After the eval at `step` (−1: the baseline) with its metrics and per-problem records.
    pub fn eval(&mut self, step: i64, metrics: &BTreeMap<String, f64>, records: &[EvalResultRecord]) -> Vec<Firing> {
        let Some(&pass1) = metrics.get(&eval_names::pass_at(1)).or_else(|| metrics.iter().find(|(k, _)| eval_names::parse_pass_at(k).is_some()).map(|(_, v)| v)) else { return vec![] };
        self.history.evals.push((step, pass1));
        self.history.eval_metrics.push((step, metrics.clone()));
        let greedy = greedy_outcomes(metrics, records);
        if !greedy.is_empty() {
            if self.history.greedy_first.is_none() {
                self.history.greedy_first = Some((step, greedy.clone()));
            }
            self.history.greedy_now = Some((step, greedy));
        }
        let mut out = vec![];
        for signal in Signal::EVAL {
            let evidence = match signal.action(&self.cfg) {
                Action::Off => None,
                _ => match signal {
                    Signal::RewardWithoutEvalGain => self.reward_without_eval_gain(),
                    Signal::GreedyBelowBaseline => evals::greedy_below(&self.cfg, self.history.greedy_first.as_ref(), self.history.greedy_now.as_ref()),
                    _ => evals::coverage(&self.cfg, &self.history.eval_metrics).map(|e| (e, vec![])),
                },
            };
            self.fire(signal, step, evidence, &mut out);
        }
        out
    }

    fn fire(&mut self, signal: Signal, step: i64, evidence: Option<(String, Vec<String>)>, out: &mut Vec<Firing>) {
        match evidence {
            Some((evidence, leads)) => {
                if self.holding.insert(signal) {
                    out.push(Firing { signal, step, evidence, action: signal.action(&self.cfg), leads });
                }
            }
            None => {
                self.holding.remove(&signal);
            }
        }
    }

    /// Train reward's window mean rose by `reward_rise` from the first steps to the last while
    /// eval pass@1 gained less than `eval_gain` over the first eval.
    fn reward_without_eval_gain(&self) -> Option<(String, Vec<String>)> {
        let cfg = &self.cfg.reward_without_eval_gain;
        let h = &self.history;
        let (&(first_step, first), &(_, now)) = (h.evals.first()?, h.evals.last()?);
        if h.evals.len() < 2 {
            return None;
        }
        let rewards: Vec<(i64, f64)> = h.steps.iter().filter_map(|p| Some((p.step, p.get(crate::runlog::metrics::train::REWARD_MEAN)?))).collect();
        let w = (self.cfg.window as usize).min(rewards.len() / 2);
        if w == 0 {
            return None;
        }
        let mean = |xs: &[(i64, f64)]| xs.iter().map(|x| x.1).sum::<f64>() / xs.len() as f64;
        let (early, late) = (&rewards[..w], &rewards[rewards.len() - w..]);
        let rise = mean(late) - mean(early);
        let gain = now - first;
        if rise < cfg.reward_rise || gain >= cfg.eval_gain {
            return None;
        }
        let first_name = if first_step < 0 { "the baseline".to_owned() } else { format!("step {first_step}") };
        let evidence = format!(
            "train/reward_mean rose {} (steps {}–{}: {} → steps {}–{}: {}) while eval pass@1 went {} → {} since {first_name}",
            signals::fmt(rise),
            early[0].0,
            early[w - 1].0,
            signals::fmt(mean(early)),
            late[0].0,
            late[w - 1].0,
            signals::fmt(mean(late)),
            signals::pct(first),
            signals::pct(now),
        );
        Some((evidence, h.leads.list(early[0].0, late[0].0)))
    }
}

/// The `events.jsonl` diagnostic events of a run, as [`Firing`]s are recorded.
pub fn recorded(events: &[EventRecord]) -> Vec<&EventRecord> {
    events.iter().filter(|e| matches!(e, EventRecord::Diagnostic { .. })).collect()
}

/// Each problem's greedy pass/fail in an eval's records: the greedy protocol's, or the main
/// eval's when it is greedy (then it also wrote `eval/greedy/pass@1`). Empty without either.
fn greedy_outcomes(metrics: &BTreeMap<String, f64>, records: &[EvalResultRecord]) -> BTreeMap<String, bool> {
    let tagged: BTreeMap<String, bool> = records.iter().filter(|r| r.protocol.is_some() && r.n > 0).map(|r| (r.problem_id.clone(), r.correct > 0)).collect();
    if !tagged.is_empty() || !metrics.contains_key(eval_names::GREEDY_PASS_AT_1) {
        return tagged;
    }
    records.iter().filter(|r| r.protocol.is_none() && r.n == 1).map(|r| (r.problem_id.clone(), r.correct > 0)).collect()
}

/// Feeds a run's records to `monitor` in the order the engine does (a metrics line's step, then
/// its eval with its per-problem results) and returns what fired.
pub fn replay(monitor: &mut Monitor, metrics: &[crate::runlog::MetricsLine], rollouts: &[RolloutRecord], evals: &[EvalResultRecord]) -> Vec<Firing> {
    let mut by_step: BTreeMap<i64, Vec<&RolloutRecord>> = BTreeMap::new();
    for r in rollouts {
        by_step.entry(i64::from(r.step)).or_default().push(r);
    }
    let mut eval_at: BTreeMap<i64, Vec<EvalResultRecord>> = BTreeMap::new();
    for r in evals {
        eval_at.entry(r.step).or_default().push(r.clone());
    }
    let mut out = vec![];
    for line in metrics {
        if let Ok(step) = u32::try_from(line.step) {
            out.extend(monitor.step(step, &line.values, by_step.get(&line.step).into_iter().flatten().copied()));
        }
        out.extend(monitor.eval(line.step, &line.values, eval_at.get(&line.step).map_or(&[][..], Vec::as_slice)));
    }
    out
}
