//! The console side of a run: progress bars for sampling, grading and evaluation, and one line per
//! step (`step 3  reward 0.42  correct 38%  skipped 2/8  sample 41s grade 3s train 12s`).
#![allow(clippy::print_stderr)]

use std::sync::Mutex;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

use crate::engine::{Event, EventSink};

/// Draws engine events on stderr.
pub struct Console {
    bar: Mutex<Option<ProgressBar>>,
    bars: bool,
}

impl Console {
    /// Progress bars only on a terminal (and never under `NO_PROGRESS`); lines always.
    pub fn new() -> Self {
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

fn secs(m: &std::collections::BTreeMap<String, f64>, k: &str) -> String {
    let s = m.get(k).copied().unwrap_or(0.0);
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
            Event::Step { step, metrics: m } => {
                self.finish_bar();
                let g = |k: &str| m.get(k).copied().unwrap_or(0.0);
                let mut line = format!(
                    "step {step}  reward {:.3}  correct {:.0}%  format {:.0}%  skipped {}/{}  sample {} grade {} train {}",
                    g("train/reward_mean"),
                    g("train/correct_mean") * 100.0,
                    g("train/format_rate") * 100.0,
                    g("train/groups_skipped"),
                    g("train/groups"),
                    secs(&m, "time/sample_s"),
                    secs(&m, "time/grade_s"),
                    secs(&m, "time/train_s"),
                );
                if let Some(p) = m.get("eval/pass@1") {
                    line.push_str(&format!("  eval pass@1 {:.1}%", p * 100.0));
                }
                self.println(line);
            }
            Event::Eval { step, metrics } => {
                if step < 0 {
                    self.finish_bar();
                    let ks: Vec<String> = metrics.iter().filter(|(k, _)| k.starts_with("eval/pass@")).map(|(k, v)| format!("{} {:.1}%", &k[5..], v * 100.0)).collect();
                    self.println(format!("baseline  {}  ({})", ks.join("  "), secs(&metrics, "time/eval_s")));
                }
            }
            Event::Checkpoint { step, state } => self.println(format!("checkpoint after step {step}: {state}")),
            Event::Warning(w) => self.println(format!("warning: {w}")),
        }
    }
}
