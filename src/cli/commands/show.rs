//! `rlx show RUN_DIR [--step N] [--problem ID] [--failed|--passed] [--eval] [--limit N]`: a run's
//! completions as the run recorded them: prompt, completion, extracted code, per-test verdicts.
//!
//! The selection is `viewer::select`'s; this file only lays it out. Colour on a terminal, plain
//! when piped or with `NO_COLOR`, so `rlx show ... | less` and `> file` read cleanly.

use std::fmt::Write as _;
use std::path::PathBuf;

use clap::Args;

use crate::cli::{exit, printer};
use crate::runlog::{StopReason, TestOutcome, TestRecord, VerdictStatus};
use crate::viewer::{self, Completion, Query, Step, Verdict};

/// `rlx show`.
#[derive(Debug, Args)]
pub struct ShowArgs {
    /// The run directory (`runs/<id>`).
    #[arg(value_name = "RUN_DIR")]
    pub run: PathBuf,
    /// The step: a number, `last`, or with `--eval` `-1`/`base` for the baseline evaluation.
    /// Default: the last step, or every step when `--problem` is given.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub step: Option<Step>,
    /// Only this problem (its id in the dataset).
    #[arg(long, value_name = "ID")]
    pub problem: Option<String>,
    /// Only completions that did not pass every test (failed tests, no code, sandbox failures).
    #[arg(long, conflicts_with = "passed")]
    pub failed: bool,
    /// Only completions that passed every test.
    #[arg(long)]
    pub passed: bool,
    /// Evaluation completions (`eval_rollouts.jsonl`) instead of training ones.
    #[arg(long)]
    pub eval: bool,
    /// Show at most N completions (0: all).
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub limit: usize,
}

pub(crate) fn run(args: ShowArgs) -> anyhow::Result<u8> {
    let verdict = match (args.passed, args.failed) {
        (true, _) => Verdict::Passed,
        (_, true) => Verdict::Failed,
        _ => Verdict::Any,
    };
    let q = Query { eval: args.eval, step: args.step, problem: args.problem, verdict, limit: args.limit };
    let sel = match viewer::select(&args.run, &q) {
        Ok(s) => s,
        Err(e) if e.is_user_error() => {
            printer::error_chain(&e, &e.hint().into_iter().collect::<Vec<_>>());
            return Ok(exit::USAGE);
        }
        Err(e) => return Err(e.into()),
    };
    if let Some(line) = sel.torn_line {
        printer::warning(&format!("{}: torn last line {line} skipped (an interrupted write, or the run is live)", sel.file), &[]);
    }
    let paint = Paint(printer::stdout_styled());
    let mut out = String::new();
    for (i, c) in sel.completions.iter().enumerate() {
        if i > 0 {
            out.push('\n');
        }
        completion(&mut out, c, paint);
    }
    if !out.is_empty() {
        printer::out(out.trim_end());
    }
    let at = match sel.steps.as_slice() {
        [s] => format!("step {}", step_name(*s)),
        many => format!("{} steps", many.len()),
    };
    let which = match verdict {
        Verdict::Any => "",
        Verdict::Passed => " passed",
        Verdict::Failed => " failed",
    };
    if sel.matched == 0 {
        printer::status(format!("no{which} completions among the {} at {at} in {}", sel.considered, sel.file));
    } else if sel.completions.len() < sel.matched {
        printer::status(format!("showed {} of {}{which} completions at {at} in {}; `--limit 0` shows all", sel.completions.len(), sel.matched, sel.file));
    }
    Ok(exit::OK)
}

/// ANSI styling, or none.
#[derive(Clone, Copy)]
struct Paint(bool);

impl Paint {
    fn paint(self, code: &str, s: &str) -> String {
        if self.0 { format!("\x1b[{code}m{s}\x1b[0m") } else { s.to_owned() }
    }
    fn bold(self, s: &str) -> String {
        self.paint("1", s)
    }
    fn dim(self, s: &str) -> String {
        self.paint("2", s)
    }
    fn label(self, s: &str) -> String {
        self.paint("1;36", s)
    }
    /// Green for a pass, red for a failure, yellow for what is not the model's fault.
    fn verdict(self, ok: Option<bool>, s: &str) -> String {
        match ok {
            Some(true) => self.paint("1;32", s),
            Some(false) => self.paint("1;31", s),
            None => self.paint("1;33", s),
        }
    }
}

fn step_name(s: i64) -> String {
    if s < 0 { "-1 (baseline)".into() } else { s.to_string() }
}

fn verdict_name(s: VerdictStatus) -> (&'static str, Option<bool>) {
    match s {
        VerdictStatus::Passed => ("passed", Some(true)),
        VerdictStatus::Failed => ("failed", Some(false)),
        VerdictStatus::FormatError => ("format error (no code block)", Some(false)),
        VerdictStatus::InfraError => ("infrastructure error (not scored)", None),
    }
}

fn outcome_name(s: TestOutcome) -> (&'static str, Option<bool>) {
    match s {
        TestOutcome::Passed => ("passed", Some(true)),
        TestOutcome::WrongAnswer => ("wrong_answer", Some(false)),
        TestOutcome::RuntimeError => ("runtime_error", Some(false)),
        TestOutcome::Timeout => ("timeout", Some(false)),
        TestOutcome::MemoryLimit => ("memory_limit", Some(false)),
        TestOutcome::OutputLimit => ("output_limit", Some(false)),
        TestOutcome::CompileError => ("compile_error", Some(false)),
    }
}

/// One completion: header, prompt, text, code, tests, infra error.
fn completion(out: &mut String, c: &Completion, p: Paint) {
    let mut head = format!("step {} · problem `{}`", step_name(c.step), c.graded.problem_id);
    if let Some(src) = &c.source {
        let _ = write!(head, " ({src})");
    }
    match &c.training {
        Some(t) => {
            let _ = write!(head, " · group {} sample {}", t.group, c.graded.sample);
        }
        None => {
            let greedy = if c.protocol.is_some() { "greedy " } else { "" };
            let _ = write!(head, " · {greedy}sample {}", c.graded.sample);
        }
    }
    let _ = writeln!(out, "{} {}", p.bold("──"), p.bold(&head));
    let (name, ok) = verdict_name(c.graded.status);
    // A format or infrastructure error ran no tests: a count would read as "failed them all".
    let graded = matches!(c.graded.status, VerdictStatus::Passed | VerdictStatus::Failed);
    let tests = if graded && c.graded.tests_total > 0 { format!(", {}/{} tests passed", c.graded.tests_passed, c.graded.tests_total) } else { String::new() };
    let _ = writeln!(out, "{}  {}{tests}", p.label("verdict"), p.verdict(ok, name));
    if let Some(t) = &c.training {
        let skipped = if t.skipped { "; group skipped: every reward equal" } else { "" };
        let _ = writeln!(out, "{}   {} (advantage {}{skipped})", p.label("reward"), number(t.reward), number(t.advantage));
    }
    let stop = match c.graded.stop_reason {
        StopReason::Stop => "stopped by a stop token",
        StopReason::Length => "cut off at max_tokens",
    };
    let _ = writeln!(out, "{}   {}, {stop}", p.label("tokens"), c.graded.tokens);
    if let Some(e) = &c.graded.error {
        let _ = writeln!(out, "{}  {}", p.verdict(None, "infra error"), e.trim());
    }
    section(out, p, "prompt", &prompt_text(c), "(not recorded: this run logged no prompts, or not this group's first completion)");
    if let Some(t) = c.training.as_ref().filter(|t| t.stop.is_some()) {
        conversation(out, p, t);
    } else if let Some(t) = c.training.as_ref().filter(|t| !t.turns.is_empty()) {
        let _ = writeln!(out, "{}", p.label(&format!("attempts ({})", t.attempts)));
        for (i, a) in t.turns.iter().enumerate() {
            let (name, ok) = verdict_name(a.status);
            let _ = writeln!(out, "  {}  {} · {} tests passed", i + 1, p.verdict(ok, name), a.tests_passed);
            if i > 0
                && let Some(m) = &a.prompt_last_message
            {
                let _ = writeln!(out, "     {} {}", p.dim("feedback:"), clip_lines(m, 3, 200).replace('\n', "\n     "));
            }
        }
    }
    section(out, p, "completion", &c.graded.text, "(empty)");
    let code_label = c.graded.language.as_deref().map_or_else(|| "code".to_owned(), |l| format!("code ({l})"));
    section(out, p, &code_label, c.graded.code.as_deref().unwrap_or(""), "(no code block found)");
    tests_section(out, c, p);
}

/// A tool-using trajectory as a conversation: each assistant turn, its tool calls and what
/// came back, and why it ended.
fn conversation(out: &mut String, p: Paint, t: &crate::viewer::Training) {
    let stop = t.stop.as_deref().unwrap_or("completed");
    let _ = writeln!(out, "{}", p.label(&format!("conversation ({} turns, stop: {stop})", t.turns.len())));
    for (i, a) in t.turns.iter().enumerate() {
        let tokens = a.tokens.map(|n| format!(", {n} tokens")).unwrap_or_default();
        let masked = if a.masked { ", masked in training" } else { "" };
        let _ = writeln!(out, "  {}", p.bold(&format!("[assistant · turn {}{tokens}{masked}]", i + 1)));
        for line in clip_lines(&a.text, 12, 2000).lines() {
            let _ = writeln!(out, "  {} {line}", p.dim("│"));
        }
        if let Some(e) = &a.parse_error {
            let _ = writeln!(out, "  {} {e}", p.verdict(Some(false), "malformed tool call:"));
        }
        for c in &a.calls {
            let state = match (&c.output, c.error) {
                (None, _) => " (not run: a limit)",
                (Some(_), true) => " (tool error)",
                (Some(_), false) => "",
            };
            let _ = writeln!(out, "  {}", p.bold(&format!("[tool {}{state}]", c.name)));
            for line in clip_lines(c.output.as_deref().unwrap_or(""), 8, 800).lines() {
                let _ = writeln!(out, "  {} {line}", p.dim("│"));
            }
        }
    }
}

/// A labelled block of text, each line behind a gutter; `none` when the text is empty.
fn section(out: &mut String, p: Paint, label: &str, text: &str, none: &str) {
    let _ = writeln!(out, "{}", p.label(label));
    if text.trim().is_empty() {
        let _ = writeln!(out, "  {}", p.dim(none));
        return;
    }
    for line in text.trim_end().lines() {
        let _ = writeln!(out, "  {} {line}", p.dim("│"));
    }
}

fn prompt_text(c: &Completion) -> String {
    c.graded.prompt.iter().map(|m| format!("[{}]\n{}", m.role, m.content.trim_end())).collect::<Vec<_>>().join("\n")
}

fn tests_section(out: &mut String, c: &Completion, p: Paint) {
    if c.graded.tests.is_empty() {
        if c.graded.code.is_some() && c.graded.error.is_none() {
            let _ = writeln!(out, "{}", p.label("tests"));
            let _ = writeln!(out, "  {}", p.dim("(per-test verdicts not recorded: the run predates them)"));
        }
        return;
    }
    let _ = writeln!(out, "{}", p.label("tests"));
    let cut = if c.graded.tests.len() < c.graded.tests_total { format!(" (grading stopped after test {}: the first failure)", c.graded.tests.len()) } else { String::new() };
    for (i, t) in c.graded.tests.iter().enumerate() {
        let _ = writeln!(out, "{}", test_line(i, t, p));
    }
    if !cut.is_empty() {
        let _ = writeln!(out, "  {}", p.dim(cut.trim()));
    }
}

fn test_line(i: usize, t: &TestRecord, p: Paint) -> String {
    let (name, ok) = outcome_name(t.status);
    // Padded before painting, so escapes do not upset the alignment.
    let mut s = format!("  {:>3}  {}  {:>6} ms", i + 1, p.verdict(ok, &format!("{name:<13}")), t.time_ms);
    if let Some(g) = &t.got {
        let _ = write!(s, "  {} {}", p.dim("got:"), clip_lines(g, 3, 200).replace('\n', "\n                               "));
    }
    if let Some(e) = &t.error {
        // A compiler's first error is what counts; a traceback's last lines are.
        let tail = if t.status == TestOutcome::CompileError { clip_lines(e, 12, 1600) } else { last_lines(e, 6) };
        for l in tail.lines() {
            let _ = write!(s, "\n         {} {l}", p.dim("│"));
        }
    }
    s
}

/// The first `lines` lines of `s`, at most `chars` characters, marked `…` when cut.
fn clip_lines(s: &str, lines: usize, chars: usize) -> String {
    let t: String = s.trim_end().lines().take(lines).collect::<Vec<_>>().join("\n");
    let clipped: String = t.chars().take(chars).collect();
    if clipped.len() < s.trim_end().len() { format!("{clipped}…") } else { clipped }
}

/// The last `n` lines of a traceback: where it failed and why.
fn last_lines(s: &str, n: usize) -> String {
    let lines: Vec<&str> = s.trim_end().lines().collect();
    let start = lines.len().saturating_sub(n);
    let mut out = if start > 0 { "…\n".to_string() } else { String::new() };
    out.push_str(&lines[start..].join("\n"));
    out
}

fn number(x: f64) -> String {
    if x.is_nan() { "—".into() } else { format!("{x:.3}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_keep_the_useful_end() {
        assert_eq!(clip_lines("a\nb\nc\nd", 2, 100), "a\nb…");
        assert_eq!(clip_lines("abc", 2, 100), "abc");
        assert_eq!(last_lines("1\n2\n3\n4", 2), "…\n3\n4");
        assert_eq!(last_lines("1\n2", 5), "1\n2");
    }

    #[test]
    fn plain_has_no_escapes_and_colour_does() {
        let t = TestRecord { status: TestOutcome::WrongAnswer, time_ms: 12, got: Some("3".into()), error: None };
        let plain = test_line(0, &t, Paint(false));
        assert_eq!(plain, "    1  wrong_answer       12 ms  got: 3");
        assert!(test_line(0, &t, Paint(true)).contains("\x1b[1;31m"));
    }
}
