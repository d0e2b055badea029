//! `rlx grade`: grade a JSONL file of completions against a problem file.
//!
//! Input: `--problems` (any supported dataset file; format auto-detected or `--format`) and
//! `--completions` (JSONL, one `{problem_id, completion | code}` per line, or a run's own
//! `eval_rollouts.jsonl` / `rollouts.jsonl`, whose stored verdicts are then compared with the new
//! ones: how many answers a change of tests re-judges). Output: one verdict
//! JSON line per completion, in input order, to `--out` or stdout; a progress bar on stderr when
//! stderr is a terminal. The sandbox starts and grades as in `rlx run` ([`crate::sandbox::start()`],
//! [`crate::sandbox::grade_loop`]): a completion whose grading hits an infrastructure error is
//! graded again up to `--infra-retries` times. Exit code 0 when everything was graded, 2 for bad
//! input, 3 when any completion still ended as `infra_error` (the output is still complete).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use serde_json::Value;

use crate::cli::error::UserError;
use crate::cli::{exit, printer};
use crate::data::{self, Format};
use crate::sandbox::{GradeOptions, Limits, Progress, Submission, Verdict, VerdictStatus, grade_all};
use crate::spec::types::{Language, Rollout, Sandbox as SandboxSpec};

/// Which sandbox grades.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxKind {
    /// The embedded, isolated sandbox (no Docker).
    Local,
    /// A Sandbox Fusion server at `--fusion-url`.
    Fusion,
    /// CoreWeave Sandbox (Aviato) at `--cwsandbox-url`: one sandbox per completion.
    Cwsandbox,
}

/// How CoreWeave sandboxes are used (`sandbox.cwsandbox.reuse`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum CwReuse {
    /// A fresh sandbox per completion.
    PerRollout,
    /// One sandbox per concurrent grading, reused.
    PerWorker,
}

/// Arguments of `rlx grade`.
#[derive(Debug, Args)]
pub struct GradeArgs {
    /// Problem file (.json array or .jsonl): LiveCodeBench, TACO/CodeContests, PrimeIntellect,
    /// Codeforces, MBPP or HumanEval rows.
    #[arg(long)]
    pub problems: PathBuf,
    /// Completions, JSONL: `{"problem_id": ..., "completion": "<model text>"}` (the last fenced
    /// code block is graded) or `{"problem_id": ..., "code": "<python>"}`; or a run's
    /// `eval_rollouts.jsonl` (its `text` graded again, its `status` compared with the new verdict).
    #[arg(long)]
    pub completions: PathBuf,
    /// Problem format; detected per row when omitted.
    #[arg(long, value_parser = parse_format)]
    pub format: Option<Format>,
    /// Which sandbox runs the code.
    #[arg(long, value_enum, default_value_t = SandboxKind::Local)]
    pub sandbox: SandboxKind,
    /// Sandbox Fusion endpoint (with `--sandbox fusion`).
    #[arg(long, env = "SANDBOX_URL", default_value = "http://localhost:8080/run_code")]
    pub fusion_url: String,
    /// CoreWeave Sandbox endpoint (with `--sandbox cwsandbox`; credentials from
    /// `CWSANDBOX_API_KEY`, `AVIATO_API_KEY` or `WANDB_API_KEY`).
    #[arg(long, env = "CWSANDBOX_BASE_URL", default_value = "https://api.cwsandbox.com")]
    pub cwsandbox_url: String,
    /// With `--sandbox cwsandbox`: a sandbox per completion (`per-rollout`) or one per
    /// concurrent grading, reused (`per-worker`).
    #[arg(long, value_enum, default_value_t = CwReuse::PerRollout)]
    pub cwsandbox_reuse: CwReuse,
    /// With `--sandbox cwsandbox`: seconds a new sandbox may take to become RUNNING before that
    /// is an infrastructure error.
    #[arg(long, default_value_t = 120.0)]
    pub cwsandbox_ready_timeout: f64,
    /// With `--sandbox cwsandbox`: sandbox creations per second at most.
    #[arg(long, default_value_t = 4.0)]
    pub cwsandbox_creates_per_s: f64,
    /// Completions graded at once [default: cores for local, 4 for fusion and cwsandbox]; the local sandbox
    /// also starts more (up to 4×) while some wait without using the CPU.
    #[arg(long)]
    pub concurrency: Option<usize>,
    /// Write verdicts here instead of stdout.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Wall-clock limit per test, seconds.
    #[arg(long, default_value_t = 6.0)]
    pub timeout: f64,
    /// Address-space limit per test, MiB.
    #[arg(long, default_value_t = 1024)]
    pub memory_mb: u64,
    /// Stop at a completion's first failing test (the reference harness's behaviour).
    #[arg(long)]
    pub fail_fast: bool,
    /// Refuse to run when an isolation layer is unavailable.
    #[arg(long)]
    pub strict: bool,
    /// Times a completion is graded again after a sandbox infrastructure error (a worker that
    /// died, a Sandbox Fusion server that does not answer) before it is reported as
    /// `infra_error`; never as a failed test. The default is the spec's `rollout.infra_retries`.
    #[arg(long, value_name = "N", default_value_t = Rollout::default().infra_retries)]
    pub infra_retries: u32,
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
    /// The language the completions are in (`python`, `cpp`, `c`): the last fenced block in it
    /// is graded; a compiled language is built first. Problems that name their own language
    /// keep it. Default `python`.
    #[arg(long, value_parser = parse_language)]
    pub language: Option<Language>,
    /// Wall-clock limit of the compile step of a compiled language, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub compile_timeout: f64,
}

fn parse_language(s: &str) -> Result<Language, String> {
    Language::parse(s).ok_or_else(|| {
        let names: Vec<&str> = Language::ALL.iter().map(|l| l.name()).collect();
        let hint = crate::spec::diagnostic::did_you_mean(s, names.iter().copied()).map(|m| format!(" (did you mean `{m}`?)")).unwrap_or_default();
        format!("unknown language `{s}`{hint}; one of {}", names.join(", "))
    })
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

/// What a run's record says about a completion it graded (`rollouts.jsonl`,
/// `eval_rollouts.jsonl`): its verdict then, and which evaluation it belongs to.
#[derive(Debug, Clone, PartialEq)]
struct Stored {
    /// Whether it passed then.
    passed: bool,
    /// `step 11`, `step 11 greedy`, or empty for a line without a step.
    group: String,
}

/// Reads the completions file: each line's problem, submission and, for a run's own record,
/// its stored verdict.
///
/// A run's records (`eval_rollouts.jsonl`, `rollouts.jsonl`) are accepted as they are: their
/// `text` is the completion (graded again from the text, so a format error stays one, where
/// their extracted `code` is null), their `status` the verdict they were given.
///
/// # Errors
/// The file cannot be read; a line is not JSON or lacks `problem_id` or `completion`/`text`/`code`
/// (a [`UserError`] naming the line).
fn read_completions(path: &PathBuf) -> anyhow::Result<Vec<(String, Submission, Option<Stored>)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read completions `{}`", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let at = || format!("`{}` line {}", path.display(), i + 1);
        let v: Value = serde_json::from_str(line).map_err(|e| UserError::with_source(format!("{}: invalid JSON", at()), e))?;
        let id = match &v["problem_id"] {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => return Err(UserError::msg(format!("{}: expected a string `problem_id`", at()))),
        };
        let sub = match (v["completion"].as_str().or_else(|| v["text"].as_str()), v["code"].as_str()) {
            (Some(c), _) => Submission::Completion(c.to_owned()),
            (None, Some(c)) => Submission::Code(c.to_owned()),
            _ => return Err(UserError::msg(format!("{}: expected a string `completion` or `code` (or a run record's `text`)", at()))),
        };
        let stored = v["status"].as_str().map(|s| {
            let step = v["step"].as_i64().map(|s| format!("step {s}")).unwrap_or_default();
            let protocol = v["protocol"].as_str().map(|p| format!(" {p}")).unwrap_or_default();
            Stored { passed: s == "passed", group: format!("{step}{protocol}") }
        });
        out.push((id, sub, stored));
    }
    Ok(out)
}

/// `against the stored verdicts: step 11: 3 of 51 changed (2 passed → failed, 1 failed →
/// passed: 62007, 62019, 62031)`, one line per evaluation (step and protocol) of the records
/// that carried a verdict; none when no line did.
fn changes(stored: &[Option<Stored>], passed_now: &[bool], ids: &[String]) -> Vec<String> {
    let mut groups: std::collections::BTreeMap<&str, (usize, Vec<&str>, Vec<&str>)> = std::collections::BTreeMap::new();
    for ((s, &now), id) in stored.iter().zip(passed_now).zip(ids) {
        let Some(s) = s else { continue };
        let g = groups.entry(s.group.as_str()).or_default();
        g.0 += 1;
        match (s.passed, now) {
            (true, false) => g.1.push(id),
            (false, true) => g.2.push(id),
            _ => {}
        }
    }
    groups
        .into_iter()
        .map(|(group, (n, lost, gained))| {
            // Each problem once, with how many of its samples changed (`62034 ×4`).
            let mut changed: Vec<(&str, usize)> = vec![];
            for id in lost.iter().chain(&gained) {
                match changed.iter_mut().find(|(c, _)| c == id) {
                    Some(c) => c.1 += 1,
                    None => changed.push((id, 1)),
                }
            }
            let shown: Vec<String> = changed.iter().take(10).map(|&(id, n)| if n > 1 { format!("{id} ×{n}") } else { id.to_owned() }).collect();
            let which = if changed.is_empty() { String::new() } else { format!(": {}{}", shown.join(", "), if changed.len() > 10 { ", ..." } else { "" }) };
            let group = if group.is_empty() { String::new() } else { format!("{group}: ") };
            format!("against the stored verdicts: {group}{} of {n} changed ({} passed → failed, {} failed → passed{which})", lost.len() + gained.len(), lost.len(), gained.len())
        })
        .collect()
}

struct Bar(indicatif::ProgressBar);

impl Progress for Bar {
    fn graded(&self, _: &Verdict) {
        self.0.inc(1);
    }
}

/// The spec's sandbox section, as the flags describe it: one start-up path for every command.
fn sandbox_spec(args: &GradeArgs) -> SandboxSpec {
    SandboxSpec {
        kind: match args.sandbox {
            SandboxKind::Local => crate::spec::types::SandboxKind::Local,
            SandboxKind::Fusion => crate::spec::types::SandboxKind::Fusion,
            SandboxKind::Cwsandbox => crate::spec::types::SandboxKind::Cwsandbox,
        },
        cwsandbox: (args.sandbox == SandboxKind::Cwsandbox).then(|| crate::spec::types::CwSandbox {
            base_url: Some(args.cwsandbox_url.clone()),
            // The workers of `per-worker` are the completions graded at once.
            max_alive: args.concurrency.unwrap_or(4).max(1) as u32,
            ready_timeout_s: args.cwsandbox_ready_timeout,
            creates_per_s: args.cwsandbox_creates_per_s,
            reuse: match args.cwsandbox_reuse {
                CwReuse::PerRollout => crate::spec::types::CwReuse::PerRollout,
                CwReuse::PerWorker => crate::spec::types::CwReuse::PerWorker,
            },
            ..Default::default()
        }),
        url: args.fusion_url.clone(),
        concurrency: Some(args.concurrency.unwrap_or(match args.sandbox {
            SandboxKind::Local => std::thread::available_parallelism().map_or(2, |n| n.get()),
            SandboxKind::Fusion | SandboxKind::Cwsandbox => 4,
        }) as u32),
        strict: args.strict,
        ..SandboxSpec::default()
    }
}

/// Run `rlx grade`.
///
/// # Errors
/// Unreadable or malformed inputs (exit code 2), a sandbox that cannot start, output that cannot
/// be written.
pub(crate) fn run(args: GradeArgs) -> anyhow::Result<u8> {
    let mut problems = data::load_file(&args.problems, args.format).with_context(|| format!("cannot load problems from `{}`", args.problems.display()))?;
    if let Some(l) = args.language {
        problems = problems.into_iter().map(|p| if p.metadata.contains_key(data::META_LANGUAGE) { p } else { p.in_language(l) }).collect();
    }
    if args.sandbox == SandboxKind::Local {
        let languages = problems.iter().map(data::Problem::language).collect::<std::collections::HashSet<_>>();
        crate::sandbox::lang::check_toolchains(languages.iter().copied())?;
        crate::sandbox::lang::warm_toolchains(languages);
    }
    let (submissions, stored): (Vec<(String, Submission)>, Vec<Option<Stored>>) = read_completions(&args.completions)?.into_iter().map(|(id, sub, st)| ((id, sub), st)).unzip();
    // An unknown problem id is a usage error (exit 2), found before any sandbox starts.
    let known: std::collections::HashSet<&str> = problems.iter().map(|p| p.id.as_str()).collect();
    if let Some((line, (id, _))) = submissions.iter().enumerate().find(|(_, (id, _))| !known.contains(id.as_str())) {
        let hints: Vec<String> = crate::spec::diagnostic::did_you_mean(id, known.iter().copied()).map(|m| format!("did you mean `{m}`?")).into_iter().collect();
        printer::error_message(&format!("`{}` line {}: problem `{id}` is not in `{}`", args.completions.display(), line + 1, args.problems.display()), &hints);
        return Ok(exit::USAGE);
    }
    if !(args.timeout > 0.0 && args.timeout.is_finite()) {
        return Err(UserError::msg(format!("`--timeout` must be a positive number of seconds, found `{}`", args.timeout)));
    }
    let opts = GradeOptions {
        limits: Limits {
            timeout: Duration::from_secs_f64(args.timeout),
            memory_mb: args.memory_mb,
            compile_timeout: Duration::from_secs_f64(args.compile_timeout.clamp(0.1, 600.0)),
            ..Limits::default()
        },
        fail_fast: args.fail_fast,
    };
    let sandbox = sandbox_spec(&args);
    let concurrency = sandbox.concurrency.unwrap_or(1) as usize;
    let bar = if args.no_progress {
        indicatif::ProgressBar::hidden()
    } else {
        let b = indicatif::ProgressBar::with_draw_target(Some(submissions.len() as u64), indicatif::ProgressDrawTarget::stderr());
        b.set_style(
            indicatif::ProgressStyle::with_template("{spinner} grading [{bar:30}] {pos}/{len} {per_sec} eta {eta}")
                .expect("static template")
                .progress_chars("=> "),
        );
        b
    };
    let ids: Vec<String> = submissions.iter().map(|(id, _)| id.clone()).collect();
    let progress: Arc<dyn Progress> = Arc::new(Bar(bar.clone()));
    let runtime = super::common::runtime()?;
    let graded = runtime.block_on(async {
        let started = crate::sandbox::start(&sandbox).await.context("cannot start the sandbox")?;
        for w in &started.warnings {
            bar.suspend(|| printer::warning(w, &["pass `--strict` to refuse to run instead".into()]));
        }
        // The local pool decides itself which submissions may start (more than `concurrency`
        // while some wait off the CPU); the grading loop only has to offer that many.
        let in_flight = match &started.grader {
            crate::sandbox::AnyGrader::Local(l) => l.max_in_flight(),
            crate::sandbox::AnyGrader::Fusion(_) | crate::sandbox::AnyGrader::Remote(_) => concurrency,
        };
        let grader = Arc::new(started.grader);
        let graded = grade_all(grader.clone(), &problems, submissions, &opts, in_flight, args.infra_retries, progress).await;
        grader.close().await;
        graded.context("grading failed")
    })?;
    bar.finish_and_clear();
    let mut sink: Box<dyn std::io::Write> = match &args.out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create `{}`", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    for g in &graded {
        serde_json::to_writer(&mut sink, &g.verdict)?;
        sink.write_all(b"\n")?;
    }
    sink.flush()?;
    let infra = graded.iter().filter(|g| g.verdict.status == VerdictStatus::InfraError).count();
    let passed = graded.iter().filter(|g| g.verdict.passed).count();
    let retried: u32 = graded.iter().map(|g| g.infra_errors).sum::<u32>() - infra as u32;
    let retries = if retried > 0 { format!(" ({retried} regrade(s) after infrastructure errors)") } else { String::new() };
    printer::status(format!("graded {}: {} passed, {} failed or format errors, {} infra errors{retries}", graded.len(), passed, graded.len() - passed - infra, infra));
    for line in changes(&stored, &graded.iter().map(|g| g.verdict.passed).collect::<Vec<_>>(), &ids) {
        printer::status(line);
    }
    if let Some(g) = graded.iter().find(|g| g.verdict.status == VerdictStatus::InfraError) {
        printer::warning(
            &format!(
                "{infra} completion(s) were not graded (infra_error after {} attempt(s) each); first: {}",
                args.infra_retries + 1,
                g.verdict.error.as_deref().unwrap_or("?")
            ),
            &[],
        );
    }
    Ok(if infra > 0 { exit::INTERNAL } else { exit::OK })
}
