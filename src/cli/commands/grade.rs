//! `rlx grade`: grade a JSONL file of completions against a problem file.
//!
//! Input: `--problems` (any supported dataset file; format auto-detected or `--format`) and
//! `--completions` (JSONL, one `{problem_id, completion | code}` per line). Output: one verdict
//! JSON line per completion, in input order, to `--out` or stdout; a progress bar on stderr when
//! stderr is a terminal. Exit code 0 when everything was graded, 3 when any completion ended as
//! `infra_error` (the output is still complete).

use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};
use serde_json::Value;

use crate::cli::{exit, printer};
use crate::data::{self, Format};
use crate::sandbox::fusion::{FusionClient, FusionConfig};
use crate::sandbox::local::{LocalConfig, LocalSandbox};
use crate::sandbox::{AnyGrader, GradeOptions, Limits, Progress, Submission, Verdict, VerdictStatus, grade_all};

/// Which sandbox grades.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum SandboxKind {
    /// The embedded, isolated sandbox (no Docker).
    Local,
    /// A Sandbox Fusion server at `--fusion-url`.
    Fusion,
}

/// Arguments of `rlx grade`.
#[derive(Debug, Args)]
pub struct GradeArgs {
    /// Problem file (.json array or .jsonl): LiveCodeBench, TACO/CodeContests, PrimeIntellect,
    /// Codeforces, MBPP or HumanEval rows.
    #[arg(long)]
    pub problems: PathBuf,
    /// Completions, JSONL: `{"problem_id": ..., "completion": "<model text>"}` (the last fenced
    /// code block is graded) or `{"problem_id": ..., "code": "<python>"}`.
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
    /// Completions graded at once [default: cores for local, 4 for fusion].
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
    /// No progress bar.
    #[arg(long)]
    pub no_progress: bool,
}

fn parse_format(s: &str) -> Result<Format, String> {
    s.parse()
}

/// Reads the completions file.
fn read_completions(path: &PathBuf) -> anyhow::Result<Vec<(String, Submission)>> {
    let text = std::fs::read_to_string(path).with_context(|| format!("cannot read completions `{}`", path.display()))?;
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            continue;
        }
        let v: Value = serde_json::from_str(line).with_context(|| format!("`{}` line {}: invalid JSON", path.display(), i + 1))?;
        let id = match &v["problem_id"] {
            Value::String(s) => s.clone(),
            Value::Number(n) => n.to_string(),
            _ => bail!("`{}` line {}: expected a string `problem_id`", path.display(), i + 1),
        };
        let sub = match (v["completion"].as_str(), v["code"].as_str()) {
            (Some(c), _) => Submission::Completion(c.to_owned()),
            (None, Some(c)) => Submission::Code(c.to_owned()),
            _ => bail!("`{}` line {}: expected a string `completion` or `code`", path.display(), i + 1),
        };
        out.push((id, sub));
    }
    Ok(out)
}

struct Bar(indicatif::ProgressBar);

impl Progress for Bar {
    fn graded(&self, _: &Verdict) {
        self.0.inc(1);
    }
}

/// Run `rlx grade`.
pub fn run(args: GradeArgs) -> anyhow::Result<u8> {
    let problems = data::load_file(&args.problems, args.format).context("cannot load problems")?;
    let submissions = read_completions(&args.completions)?;
    // An unknown problem id is a usage error (exit 2), found before any sandbox starts.
    let known: std::collections::HashSet<&str> = problems.iter().map(|p| p.id.as_str()).collect();
    if let Some((line, (id, _))) = submissions.iter().enumerate().find(|(_, (id, _))| !known.contains(id.as_str())) {
        let hint = crate::spec::diagnostic::did_you_mean(id, known.iter().copied()).map(|m| format!("\n  hint: did you mean `{m}`?")).unwrap_or_default();
        printer::status(format!(
            "error: `{}` line {}: problem `{id}` is not in `{}`{hint}",
            args.completions.display(),
            line + 1,
            args.problems.display()
        ));
        return Ok(exit::USAGE);
    }
    if !(args.timeout > 0.0 && args.timeout.is_finite()) {
        bail!("`--timeout` must be a positive number of seconds, got `{}`", args.timeout);
    }
    let opts = GradeOptions {
        limits: Limits { timeout: Duration::from_secs_f64(args.timeout), memory_mb: args.memory_mb, ..Limits::default() },
        fail_fast: args.fail_fast,
    };
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
    let progress: Arc<dyn Progress> = Arc::new(Bar(bar.clone()));
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().context("cannot start the async runtime")?;
    let verdicts = runtime.block_on(async {
        let (grader, concurrency) = match args.sandbox {
            SandboxKind::Local => {
                let config = LocalConfig { strict: args.strict, ..LocalConfig::default() };
                let workers = args.concurrency.unwrap_or(config.workers);
                let sandbox = LocalSandbox::start(LocalConfig { workers, ..config }).await.context("cannot start the local sandbox")?;
                warn_protection(sandbox.protection());
                (AnyGrader::Local(sandbox), workers)
            }
            SandboxKind::Fusion => {
                let concurrency = args.concurrency.unwrap_or(4);
                let client = FusionClient::new(FusionConfig { concurrency, ..FusionConfig::new(&args.fusion_url) })?;
                (AnyGrader::Fusion(Box::new(client)), concurrency)
            }
        };
        grade_all(Arc::new(grader), &problems, submissions, &opts, concurrency, progress).await.context("grading failed")
    })?;
    bar.finish_and_clear();
    let mut sink: Box<dyn std::io::Write> = match &args.out {
        Some(p) => Box::new(std::io::BufWriter::new(
            std::fs::File::create(p).with_context(|| format!("cannot create `{}`", p.display()))?,
        )),
        None => Box::new(std::io::BufWriter::new(std::io::stdout().lock())),
    };
    for v in &verdicts {
        serde_json::to_writer(&mut sink, v)?;
        sink.write_all(b"\n")?;
    }
    sink.flush()?;
    let infra = verdicts.iter().filter(|v| v.status == VerdictStatus::InfraError).count();
    let passed = verdicts.iter().filter(|v| v.passed).count();
    #[allow(clippy::print_stderr)]
    {
        eprintln!("graded {}: {} passed, {} failed or format errors, {} infra errors", verdicts.len(), passed, verdicts.len() - passed - infra, infra);
        if let Some(v) = verdicts.iter().find(|v| v.status == VerdictStatus::InfraError) {
            eprintln!("warning: {infra} completion(s) were not graded (infra_error); first: {}", v.error.as_deref().unwrap_or("?"));
        }
    }
    Ok(if infra > 0 { exit::INTERNAL } else { exit::OK })
}

/// Say once, loudly, what isolation is missing.
#[allow(clippy::print_stderr)]
pub fn warn_protection(p: &crate::sandbox::Protection) {
    if !p.is_complete() {
        eprintln!("warning: the sandbox runs with reduced isolation on this machine:");
        for n in &p.notes {
            eprintln!("  - {n}");
        }
        eprintln!("hint: pass `--strict` to refuse to run instead");
    }
}
