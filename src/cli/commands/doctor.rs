//! `rlx doctor RUN_DIR`: the reference's smoke-test expectations and the diagnostic signals
//! over a run directory (`crate::health::doctor`); this prints them.

use std::path::PathBuf;

use clap::Args;

use crate::cli::error::UserError;
use crate::cli::{exit, printer};
use crate::health::categories::Breakdown;
use crate::health::doctor;

/// `rlx doctor`.
#[derive(Debug, Args)]
pub struct DoctorArgs {
    /// A run directory (finished, stopped or still running).
    #[arg(value_name = "RUN_DIR")]
    pub dir: PathBuf,
}

pub(crate) fn run(args: DoctorArgs) -> anyhow::Result<u8> {
    if !args.dir.join(crate::runlog::files::STATUS).is_file() {
        return Err(UserError::msg(format!("`{}` is not a run directory (it has no status.json); run directories are `runs/<run-id>/`", args.dir.display())));
    }
    let r = doctor::doctor(&args.dir)?;
    let mut state = format!("{}, {} of {} steps", r.state, r.steps_done, r.steps_planned);
    if r.steps_planned > r.max_steps && r.max_steps > 0 {
        // A staged run: the supervised stages come first, the GRPO stage is the last steps.
        state.push_str(&format!(", the last {} in the GRPO stage", r.max_steps));
    }
    if let Some(why) = &r.reason {
        state.push_str(&format!(": {why}"));
    }
    printer::out(format!("{} ({state})", r.run_id));
    printer::out("");
    if r.max_steps == 0 {
        printer::out("Smoke test: none (an evaluation-only run trains no step)");
    } else {
        printer::out(format!("Smoke test: the reference's expectations for its first 50 steps, scaled to {} steps", r.max_steps));
    }
    for e in r.smoke.iter().filter(|_| r.max_steps > 0) {
        let mark = match e.met {
            Some(true) => "ok  ",
            Some(false) => "NO  ",
            None => "n/a ",
        };
        printer::out(format!("  {mark} steps {:<6} (ref. {:<5})  {}", e.steps, e.reference, e.expect));
        printer::out(format!("{:>8}{}", "", e.seen));
    }
    if let Some(b) = &r.categories {
        printer::out("");
        for line in category_lines(b) {
            printer::out(line);
        }
    }
    printer::out("");
    match r.fired.len() {
        0 => printer::out("Diagnostics: no signal fired"),
        n => printer::out(format!("Diagnostics: {n} signal{} fired (thresholds: the run's `diagnostics:`)", if n == 1 { "" } else { "s" })),
    }
    for f in &r.fired {
        printer::out(format!("  {}", f.line()));
    }
    if r.recorded > 0 {
        printer::out(format!("  ({} recorded in events.jsonl while the run went)", r.recorded));
    }
    Ok(exit::OK)
}

/// The by-category block: a title, a header, one line per category (`all` last).
fn category_lines(b: &Breakdown) -> Vec<String> {
    let from = if b.from < 0 { "the baseline".to_owned() } else { format!("step {}", b.from) };
    let mut out = vec![format!("By category (pass@1 %, {from} → step {}, each problem once; no test per category)", b.to)];
    out.extend(b.notes.iter().map(|n| format!("  ({n})")));
    out.push(format!("  {:<10}{:>8}  {}", "category", "problems", b.protocols.iter().map(|p| format!("{p:<34}")).collect::<String>().trim_end()));
    for (name, shifts) in &b.rows {
        let problems = shifts.iter().flatten().map(|s| s.problems).next().unwrap_or(0);
        let cells: String = shifts.iter().map(|s| format!("{:<34}", s.map_or("—".to_owned(), |s| s.cell()))).collect();
        out.push(format!("  {name:<10}{problems:>8}  {}", cells.trim_end()));
    }
    out
}
