//! The console side of a run: progress bars for sampling, grading and evaluation, and one line per
//! step (`step 3  reward 0.42  correct 38%  skipped 2/8  sample 41s grade 3s train 12s`).
//!
//! Metrics are read as a [`MetricsLine`] by the names in `runlog::metrics`, the ones the engine
//! writes with, so a misspelt name cannot quietly print 0.
#![allow(clippy::print_stderr)]

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::engine::{Event, EventSink};
use crate::runlog::MetricsLine;
use crate::runlog::metrics::{eval as eval_metrics, optim, time, train};

/// Draws engine events on stderr.
pub(crate) struct Console {
    bar: Mutex<Option<ProgressBar>>,
    bars: bool,
}

impl Console {
    /// Progress bars only on a terminal (and never under `NO_PROGRESS`); lines always.
    pub(crate) fn new() -> Self {
        use std::io::IsTerminal;
        Console { bar: Mutex::new(None), bars: std::io::stderr().is_terminal() && std::env::var_os("NO_PROGRESS").is_none() }
    }

    fn println(&self, line: String) {
        match self.bar.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
            Some(b) => b.println(line),
            None => eprintln!("{line}"),
        }
    }

    fn finish_bar(&self) {
        if let Some(b) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            b.finish_and_clear();
        }
    }
}

impl Default for Console {
    fn default() -> Self {
        Self::new()
    }
}

/// A metric for the console; 0 when the line lacks it (a step that trained nothing has no loss).
fn value(m: &MetricsLine, name: &str) -> f64 {
    m.get(name).unwrap_or(0.0)
}

/// A duration metric for the console.
fn secs(m: &MetricsLine, name: &str) -> String {
    let s = value(m, name);
    if s >= 10.0 { format!("{s:.0}s") } else { format!("{s:.1}s") }
}

impl EventSink for Console {
    fn event(&self, event: Event) {
        match event {
            Event::Started { run_id, dir, first_step, max_steps, problems } => {
                let what = if first_step > 0 { format!("resuming at step {first_step}") } else { "starting".into() };
                self.println(format!("{run_id}: {what} of {max_steps} ({} train / {} eval problems) → {}", problems.0, problems.1, dir.display()));
            }
            Event::Phase { step, phase, total } => {
                self.finish_bar();
                if self.bars {
                    let b = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
                    b.set_style(ProgressStyle::with_template("{prefix:>12} [{bar:30}] {pos}/{len} {elapsed}").expect("valid template").progress_chars("=> "));
                    b.set_prefix(if step < 0 { format!("{phase} base") } else { format!("{phase} {step}") });
                    *self.bar.lock().unwrap_or_else(|e| e.into_inner()) = Some(b);
                }
            }
            Event::Progress { done, .. } => {
                if let Some(b) = self.bar.lock().unwrap_or_else(|e| e.into_inner()).as_ref() {
                    b.inc(done);
                }
            }
            Event::Step { step, metrics } => {
                self.finish_bar();
                let m = MetricsLine::new(i64::from(step), metrics);
                let g = |name: &str| value(&m, name);
                if let Some(nll) = m.get(train::NLL) {
                    // A supervised stage's step: no rollouts to describe.
                    let held = m.get(eval_metrics::NLL).map(|v| format!("  eval nll {v:.4}")).unwrap_or_default();
                    let pass = m.pass_at(1).map(|p| format!("  eval pass@1 {:.1}%", p * 100.0)).unwrap_or_default();
                    self.println(format!("step {step}  sft  nll {nll:.4}  lr {:.2e}  train {}{held}{pass}", g(optim::LR), secs(&m, time::TRAIN_S)));
                    return;
                }
                let mut line = format!(
                    "step {step}  reward {:.3}  correct {:.0}%  format {:.0}%  skipped {}/{}  sample {} grade {} train {}",
                    g(train::REWARD_MEAN),
                    g(train::CORRECT_MEAN) * 100.0,
                    g(train::FORMAT_RATE) * 100.0,
                    g(train::GROUPS_SKIPPED),
                    g(train::GROUPS),
                    secs(&m, time::SAMPLE_S),
                    secs(&m, time::GRADE_S),
                    secs(&m, time::TRAIN_S),
                );
                if let Some(p) = m.pass_at(1) {
                    line.push_str(&format!("  eval pass@1 {:.1}%", p * 100.0));
                }
                self.println(line);
            }
            Event::Eval { step, metrics } => {
                if step < 0 {
                    self.finish_bar();
                    let m = MetricsLine::new(step, metrics);
                    // By k, not by name: `pass@10` after `pass@5`.
                    let ks: Vec<String> = m.pass_at_all().iter().map(|(k, v)| format!("pass@{k} {:.1}%", v * 100.0)).collect();
                    self.println(format!("baseline  {}  ({})", ks.join("  "), secs(&m, time::EVAL_S)));
                }
            }
            Event::Checkpoint { step, state } => self.println(format!("checkpoint after step {step}: {state}")),
            Event::Warning(w) => self.println(format!("warning: {w}")),
        }
    }
}
