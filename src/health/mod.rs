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
//! The signals are one table (`signals.rs`, a row each); the monitor checks its rows in order
//! against the section's settings (`settings.rs`) over what it has seen (`history.rs`). Children
//! name each other, never this file, so that the module has no import cycle.
//!
//! Why signals fire once per episode rather than at every step they hold: a run flat at zero
//! for 200 steps would print 196 identical lines; once the condition is false again the signal
//! re-arms.

pub mod categories;
pub mod doctor;
mod evals;
mod history;
mod leads;
mod settings;
mod signals;
pub mod smoke;
mod steps;
mod text;

use std::collections::{BTreeMap, BTreeSet};

pub use signals::{Reads, Signal};

use crate::runlog::metrics::eval as eval_names;
use crate::runlog::{EvalResultRecord, EventRecord, RolloutRecord};
use crate::spec::health::{Action, Health};

use history::{Evidence, History, Point, Seen};
use settings::Settings;

/// A signal that fired.
#[derive(Debug, Clone, PartialEq)]
pub struct Firing {
    /// Which: its row of the table.
    pub signal: &'static Signal,
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
    settings: Settings,
    /// The rows checked: the table's (a test adds its own).
    signals: Vec<&'static Signal>,
    history: History,
    /// Signals whose condition held at the last check: they do not fire again until it fails.
    holding: BTreeSet<&'static str>,
}

impl Monitor {
    /// A monitor with the spec's `diagnostics:` section.
    pub fn new(cfg: Health) -> Monitor {
        Monitor::with(Settings::of(&cfg), signals::SIGNALS.iter().collect())
    }

    /// A monitor of `signals` with `settings`. A row whose setting is missing, or lacks a
    /// threshold the row names, is not checked (a test keeps the table's rows and the spec's
    /// keys together, so only a test's row can lack one).
    fn with(settings: Settings, signals: Vec<&'static Signal>) -> Monitor {
        let signals = signals
            .into_iter()
            .filter(|s| {
                let ok = settings.get(s.name()).is_some_and(|set| s.thresholds.iter().all(|t| set.get(t).is_some()));
                if !ok {
                    tracing::warn!(signal = s.name(), "the diagnostics section has no setting with the thresholds {:?}: not checked", s.thresholds);
                }
                ok
            })
            .collect();
        Monitor { settings, signals, history: History::default(), holding: BTreeSet::new() }
    }

    /// After step `step` with its metrics line (an eval's metrics in it are read by
    /// [`Monitor::eval`], which the caller calls after this) and its rollouts.
    pub fn step<'r>(&mut self, step: u32, metrics: &BTreeMap<String, f64>, rollouts: impl IntoIterator<Item = &'r RolloutRecord>) -> Vec<Firing> {
        self.history.steps.push(Point { step: i64::from(step), metrics: metrics.clone() });
        self.history.leads.add(step, rollouts);
        self.check(Reads::Step, i64::from(step))
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
        self.check(Reads::Eval, step)
    }

    /// Checks the rows that read `reads`, in table order, after `step`.
    fn check(&mut self, reads: Reads, step: i64) -> Vec<Firing> {
        let mut out = vec![];
        for &signal in &self.signals {
            if signal.reads != reads {
                continue;
            }
            let Some(setting) = self.settings.get(signal.name()) else { continue };
            let evidence = match setting.action {
                Action::Off => None,
                _ => (signal.check)(&Seen { history: &self.history, window: self.settings.window, setting }),
            };
            match evidence {
                Some(Evidence { text, leads }) => {
                    if self.holding.insert(signal.name()) {
                        out.push(Firing { signal, step, evidence: text, action: setting.action, leads });
                    }
                }
                None => {
                    self.holding.remove(signal.name());
                }
            }
        }
        out
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
