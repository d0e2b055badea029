//! The command line: clap types (doc comments are the `--help` text), one module per subcommand
//! under `commands/`, and the output policy (`printer`, `diagnostics`). The only module that
//! prints, owns the tracing subscriber, or knows about exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

pub(crate) mod commands;
pub(crate) mod diagnostics;
pub(crate) mod printer;
pub(crate) mod progress;
pub(crate) mod signals;

/// Exit codes, documented in `rlx --help`, and which one an error gets.
pub(crate) mod exit {
    use std::error::Error as StdError;

    /// Success.
    pub(crate) const OK: u8 = 0;
    /// The run finished but failed a gate set in the spec (or a sweep member failed).
    pub(crate) const GATE: u8 = 1;
    /// Bad spec or bad arguments: a missing or malformed model, data file or spec.
    pub(crate) const USAGE: u8 = 2;
    /// Internal or infrastructure error.
    pub(crate) const INTERNAL: u8 = 3;
    /// Interrupted (SIGINT/SIGTERM).
    pub(crate) const INTERRUPTED: u8 = 130;

    /// The exit code for an error that ended a command: [`USAGE`] when the user can fix it (a
    /// missing model or file, a malformed dataset line or GGUF file, a bad spec or argument),
    /// [`INTERNAL`] otherwise, and [`OK`] for a closed stdout (the reader has what it wanted).
    ///
    /// The chain is walked outermost first and the first error of a known type decides: each
    /// module's error knows which of its variants are the user's (`is_user_error`), and plain
    /// `anyhow` context in between carries no verdict. An error of no known type is internal.
    pub(crate) fn for_error(err: &anyhow::Error) -> u8 {
        if is_broken_pipe(err) {
            return OK;
        }
        match err.chain().find_map(user_error) {
            Some(true) => USAGE,
            _ => INTERNAL,
        }
    }

    /// Whether writing results failed because the reader closed the pipe.
    pub(crate) fn is_broken_pipe(err: &anyhow::Error) -> bool {
        err.chain().any(|e| {
            e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
                || e.downcast_ref::<serde_json::Error>().is_some_and(|j| j.io_error_kind() == Some(std::io::ErrorKind::BrokenPipe))
        })
    }

    /// `Some(true)` for the user's errors, `Some(false)` for rlx's or a service's, `None` for an
    /// error this function does not know (context text, foreign errors).
    fn user_error(e: &(dyn StdError + 'static)) -> Option<bool> {
        use crate::{backend, compare, data, engine, prompt, runlog, sandbox};
        if e.is::<super::UserError>() || e.is::<crate::plan::Error>() {
            return Some(true);
        }
        if let Some(e) = e.downcast_ref::<data::Error>() {
            return Some(e.is_user_error());
        }
        if let Some(e) = e.downcast_ref::<data::source::Error>() {
            return Some(e.is_user_error());
        }
        if let Some(e) = e.downcast_ref::<data::hf::Error>() {
            return Some(e.is_user_error());
        }
        if let Some(e) = e.downcast_ref::<data::parquet::Error>() {
            return Some(e.is_user_error());
        }
        if let Some(e) = e.downcast_ref::<sandbox::Error>() {
            return Some(e.is_user_error());
        }
        if let Some(e) = e.downcast_ref::<backend::Error>() {
            return Some(e.is_user_error());
        }
        if let Some(e) = e.downcast_ref::<prompt::Error>() {
            return Some(e.is_user_error());
        }
        if let Some(e) = e.downcast_ref::<runlog::Error>() {
            return Some(e.is_user_error());
        }
        if let Some(e) = e.downcast_ref::<engine::Error>() {
            return Some(e.is_user_error());
        }
        if let Some(e) = e.downcast_ref::<compare::Error>() {
            return Some(e.is_user_error());
        }
        if let Some(e) = e.downcast_ref::<crate::viewer::Error>() {
            return Some(e.is_user_error());
        }
        // A file the user named that does not exist, reached through context only.
        if let Some(e) = e.downcast_ref::<std::io::Error>() {
            return Some(e.kind() == std::io::ErrorKind::NotFound);
        }
        None
    }
}

/// A problem with the user's input that a command finds itself (a flag value out of range, a
/// malformed line of an input file): exit code 2. Library errors carry their own verdict
/// ([`exit::for_error`]); this is for what only the command knows.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct UserError {
    /// What is wrong, naming the flag or the file and line.
    message: String,
    /// The underlying error (a JSON parse error, ...), printed as a `Caused by:` line.
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl UserError {
    /// A user error with this message.
    pub fn msg(message: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(UserError { message: message.into(), source: None })
    }

    /// A user error with this message, caused by `source`.
    pub fn with_source(message: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> anyhow::Error {
        anyhow::Error::new(UserError { message: message.into(), source: Some(Box::new(source)) })
    }
}

const AFTER_HELP: &str = "\
Exit codes: 0 success, 1 a gate in the spec (or a sweep member) failed, 2 bad spec or arguments
(or a missing or malformed model or data file), 3 internal error, 130 interrupted.

Overrides: `key.path=value` after the spec, with YAML-typed values (`lr=4e-5`, `sampling.stop=[\"```\"]`).
Aliases: lr, steps, group_size, prompts_per_step, seed, temperature, max_tokens, eval_every, save_every, lora_rank.";

/// rlx: reinforcement-learning post-training experiments for code models, from YAML specs.
#[derive(Debug, Parser)]
#[command(name = "rlx", version, about, after_help = AFTER_HELP)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// More log output (-v debug, -vv trace); `RUST_LOG` overrides.
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Check specs (schema, ranges, files, templates) without running anything.
    ///
    /// Prints every problem of every spec and exits 2 if there are any, 0 otherwise.
    Validate(ValidateArgs),
    /// Print the JSON Schema of experiment specs (what `schemas/experiment.schema.json` holds).
    Schema,
    /// Show the prompts a run would send, exactly as the model sees them, with token counts.
    Render(RenderArgs),
    /// Run an experiment: validate, plan, then train and evaluate into `runs/<run-id>/`.
    Run(RunArgs),
    /// Run a grid of experiments: `rlx sweep [SPEC] lr=[1e-5,4e-5] group_size=8,16 seed=[0,1,2]`.
    ///
    /// Without SPEC, `experiments/default.yaml` is used. Each grid point is a run whose id hashes
    /// its resolved spec, so re-launching a sweep skips finished runs and resumes the others.
    /// `--sample N` draws N configurations from ranges (`lr=loguniform(1e-6,1e-4)`) instead;
    /// `--launcher slurm` submits the members as one Slurm job array; `rlx sweep status
    /// SWEEP_DIR` shows where each member is (docs/sweeps.md).
    Sweep(SweepArgs),
    /// Grade completions against a problem file in the sandbox; one JSON line per completion.
    Grade(commands::grade::GradeArgs),
    /// The code sandbox: run a Sandbox-Fusion-compatible server.
    #[command(subcommand)]
    Sandbox(commands::sandbox::SandboxCommand),
    /// Serve Tinker's REST API over the embedded trainer, for the Tinker Python SDK and rlx's
    /// Tinker backend.
    Serve(commands::serve::ServeArgs),
    /// Compare runs: config diff, arms over seeds with 95% intervals, paired tests on shared eval
    /// problems (bootstrap, exact McNemar), pass@k; `--html` and `--png` for charts.
    ///
    /// `rlx compare runs/*`, `rlx compare sweeps/<id>`, `rlx compare runs/<id> --steps -1,last`.
    /// Statistics and how to read them: docs/compare.md.
    Compare(commands::compare::CompareArgs),
    /// Show a run's completions: prompt, completion, extracted code, per-test verdicts.
    ///
    /// `rlx show runs/<id>` (the last step), `rlx show runs/<id> --step 3 --failed`,
    /// `rlx show runs/<id> --problem 17` (every step it was drawn at), `rlx show runs/<id> --eval
    /// --step base` (the baseline evaluation). Colour on a terminal, plain when piped or with
    /// `NO_COLOR`.
    Show(commands::show::ShowArgs),
    /// Evaluate a model: pass@k (unbiased estimator) with confidence intervals on a problem set.
    ///
    /// `rlx eval SPEC [KEY=VALUE...]` evaluates a spec's policy on its `data.eval`;
    /// `rlx eval --model M --data FILE` builds the spec from flags; `rlx eval RUN_DIR[@STEP]`
    /// evaluates a run's checkpoint under the run's spec (`RUN_DIR@base`: its base model). Every
    /// way the run directory holds the per-problem results (`eval_results.jsonl`), like any run's.
    Eval(commands::eval::EvalArgs),
    /// Export a checkpoint for other tools: merged weights as a Hugging Face directory
    /// (transformers, vLLM) or a GGUF file (llama.cpp), or a PEFT LoRA adapter.
    ///
    /// `rlx export runs/<id> --out model/`, `rlx export runs/<id>@11 --format gguf --dtype q8_0
    /// --out gguf/`, `rlx export runs/<id> --adapter-only --out adapter/`; a Tinker checkpoint is
    /// downloaded first: `rlx export tinker://RUN/weights/NAME --out model/`. See docs/export.md.
    Export(commands::export::ExportArgs),
    /// Check a run directory against the reference's smoke-test expectations (format up early,
    /// reward and correctness trending up, eval above the baseline, scaled to the run's length)
    /// and list every diagnostic signal that fires over it, with evidence and remedy.
    ///
    /// `rlx doctor runs/<id>`; works on a running run. Signals and thresholds: docs/diagnostics.md.
    Doctor(commands::doctor::DoctorArgs),
    /// Mirror run directories into an experiment tracker after the fact:
    /// `rlx sync {wandb|tensorboard|mlflow} RUN_DIR...`.
    ///
    /// Sends the steps the tracker has not had (all of them for a run made before the tracker
    /// was configured); never a step twice. Exits 3 if some steps could not be sent.
    #[command(subcommand)]
    Sync(commands::sync::SyncCommand),
}

/// `rlx validate`.
#[derive(Debug, Args)]
pub struct ValidateArgs {
    /// Spec files, then `key=value` overrides applied to each of them.
    #[arg(required = true, value_name = "SPEC|KEY=VALUE")]
    pub args: Vec<String>,
    /// Also print the resolved plan: runs, steps, completions per step, token bounds.
    #[arg(long)]
    pub explain: bool,
    /// With --explain: the expected pass rate p of a pilot, to estimate the share of groups with
    /// no learning signal, p^G + (1-p)^G.
    #[arg(long, value_name = "P", requires = "explain", value_parser = parse_probability)]
    pub pilot_pass_rate: Option<f64>,
}

/// `rlx render`.
#[derive(Debug, Args)]
pub struct RenderArgs {
    /// The spec file, then `key=value` overrides.
    #[arg(required = true, value_name = "SPEC [KEY=VALUE]...")]
    pub args: Vec<String>,
    /// How many problems to show (statistics cover all of them).
    #[arg(long, default_value_t = 3)]
    pub n: usize,
    /// Render the evaluation problems instead of the training problems.
    #[arg(long)]
    pub eval: bool,
}

/// `rlx run`.
#[derive(Debug, Args)]
pub struct RunArgs {
    /// The spec file, then `key=value` overrides.
    #[arg(value_name = "SPEC [KEY=VALUE]...", required_unless_present = "resume")]
    pub args: Vec<String>,
    /// Continue the run in this directory from its last checkpoint.
    #[arg(long, value_name = "RUN_DIR")]
    pub resume: Option<PathBuf>,
    /// Sample, grade, score and compute advantages for every step, but train nothing and save
    /// no checkpoint (`schedule.dry_run=true`; works on sampling-only backends).
    #[arg(long)]
    pub dry_run: bool,
}

/// `rlx sweep`.
#[derive(Debug, Args)]
#[command(args_conflicts_with_subcommands = true)]
pub struct SweepArgs {
    /// `rlx sweep status SWEEP_DIR`.
    #[command(subcommand)]
    pub command: Option<SweepCommand>,
    /// An optional spec file (default `experiments/default.yaml`), then axes (`key=[a,b]`,
    /// `key=a,b`, `key=range(0,3)`, `key=choice(a,b)`), ranges for `--sample`
    /// (`key=loguniform(1e-6,1e-4)`, `key=uniform(a,b)`) and fixed overrides (`key=value`).
    #[arg(value_name = "[SPEC] KEY=VALUES")]
    pub args: Vec<String>,
    /// Print the runs (id, status and the keys that differ) without running them; with
    /// `--launcher slurm`, also the batch script, without submitting it.
    #[arg(long)]
    pub dry_run: bool,
    /// Runs at once: child processes here (default 1, at most 64), or the Slurm job array's `%K`
    /// (default: as many as Slurm schedules). `sweep.max_parallel` in the spec.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub max_parallel: Option<u32>,
    /// Where members run: `local` (child processes, the default) or `slurm` (one job array,
    /// submitted with sbatch). `sweep.launcher` in the spec.
    #[arg(long, value_enum, value_name = "LAUNCHER")]
    pub launcher: Option<LauncherArg>,
    /// Random search: draw N configurations from the ranges and lists instead of the grid.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub sample: Option<u32>,
    /// The seed of `--sample`'s draws: the same seed and arguments give the same runs.
    #[arg(long, value_name = "S", default_value_t = 0, requires = "sample")]
    pub sample_seed: u64,
    /// Slurm: partition of the tasks (`sbatch --partition`; `sweep.slurm.partition`).
    #[arg(long, value_name = "NAME", help_heading = "Slurm (--launcher slurm)")]
    pub partition: Option<String>,
    /// Slurm: time limit of each task (`sbatch --time`, e.g. `4:00:00`; `sweep.slurm.time`).
    #[arg(long, value_name = "TIME", help_heading = "Slurm (--launcher slurm)")]
    pub time: Option<String>,
    /// Slurm: CPUs of each task (`sbatch --cpus-per-task`; `sweep.slurm.cpus_per_task`).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..), help_heading = "Slurm (--launcher slurm)")]
    pub cpus_per_task: Option<u32>,
    /// Slurm: memory of each task (`sbatch --mem`, e.g. `32G`; `sweep.slurm.mem`).
    #[arg(long, value_name = "SIZE", help_heading = "Slurm (--launcher slurm)")]
    pub mem: Option<String>,
    /// Slurm: generic resources of each task, GPUs (`sbatch --gres`, e.g. `gpu:1`; `sweep.slurm.gres`).
    #[arg(long, value_name = "GRES", help_heading = "Slurm (--launcher slurm)")]
    pub gres: Option<String>,
    /// Slurm: one more sbatch option, repeatable (`--sbatch-arg=--account=proj`); after the
    /// spec's `sweep.slurm.sbatch_args`.
    #[arg(long, value_name = "OPTION", allow_hyphen_values = true, help_heading = "Slurm (--launcher slurm)")]
    pub sbatch_arg: Vec<String>,
    /// Slurm: shell lines each task runs before `rlx run` (module loads, a virtualenv);
    /// replaces `sweep.slurm.setup`.
    #[arg(long, value_name = "SHELL", help_heading = "Slurm (--launcher slurm)")]
    pub setup: Option<String>,
    /// Slurm: seconds before the time limit at which a task stops at the step boundary and
    /// requeues itself (`sbatch --signal=B:USR1@S`; default 300, 0 for none; `sweep.slurm.stop_before_s`).
    #[arg(long, value_name = "SECONDS", help_heading = "Slurm (--launcher slurm)")]
    pub stop_before: Option<u32>,
}

/// Where `rlx sweep` runs members.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LauncherArg {
    /// Child processes on this machine.
    Local,
    /// One Slurm job array.
    Slurm,
}

/// `rlx sweep` subcommands.
#[derive(Debug, Subcommand)]
pub enum SweepCommand {
    /// Each member's state: its run directory's (steps done) and, for a Slurm sweep, its
    /// task's in `squeue`/`sacct` where they answer.
    Status {
        /// The sweep directory (`sweeps/<sweep-id>`).
        #[arg(value_name = "SWEEP_DIR")]
        dir: PathBuf,
    },
}

fn parse_probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&p) { Ok(p) } else { Err(format!("a pass rate is between 0 and 1, found {p}")) }
}

/// Parses the command line, runs the command, maps the outcome to an exit code.
/// `dotenv` is what `main` took from `./.env` before any thread started
/// ([`crate::dotenv::load`]): the names set, and lines it could not read.
pub fn main(dotenv: (Vec<String>, Vec<(usize, String)>)) -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    let (set, bad) = dotenv;
    if !set.is_empty() {
        // Names only: the values are secrets.
        tracing::debug!(names = ?set, "read from {}", crate::dotenv::FILE);
    }
    for (line, why) in bad {
        printer::warning(&format!("{}:{line}: {why}; line skipped", crate::dotenv::FILE), &[]);
    }
    match commands::dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        // A closed stdout is the reader's choice (`rlx schema | head -1`), not a failure.
        Err(err) if exit::is_broken_pipe(&err) => ExitCode::from(exit::OK),
        Err(err) => {
            printer::error_with_hints(&err, &diagnostics::hints(&err));
            ExitCode::from(exit::for_error(&err))
        }
    }
}

/// Logs to stderr at `warn` (or per `-v`/`RUST_LOG`), and at `info` to the run's `logs.log` once
/// a run attaches it (see `runlog::logfile`).
fn init_tracing(verbose: u8) {
    use tracing_subscriber::{EnvFilter, Layer, layer::SubscriberExt, util::SubscriberInitExt};
    let default = match verbose {
        0 => "warn",
        1 => "rlx=debug,info",
        _ => "trace",
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new(default));
    let console = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).with_target(false).with_filter(filter);
    let file = tracing_subscriber::fmt::layer()
        .with_writer(crate::runlog::logfile::LogSink)
        .with_ansi(false)
        .with_filter(EnvFilter::new("info"));
    let _ = tracing_subscriber::registry().with(console).with(file).try_init();
}

#[cfg(test)]
mod tests {
    use super::exit::{INTERNAL, OK, USAGE, for_error};
    use std::path::PathBuf;

    fn io(kind: std::io::ErrorKind) -> std::io::Error {
        std::io::Error::new(kind, "os says no")
    }

    #[test]
    fn exit_codes_follow_the_first_known_cause() {
        let json = serde_json::from_str::<serde_json::Value>("{").unwrap_err();
        let data = crate::data::Error::Json { path: "train.jsonl".into(), line: 6, source: json };
        assert_eq!(for_error(&anyhow::Error::new(data).context("cannot load the problems")), USAGE);
        let model = crate::backend::Error::Model { path: PathBuf::from("m.gguf"), reason: "truncated".into() };
        assert_eq!(for_error(&anyhow::Error::new(model)), USAGE);
        let model = crate::backend::Error::Model { path: PathBuf::from("m.gguf"), reason: "truncated".into() };
        assert_eq!(for_error(&anyhow::Error::new(crate::engine::Error::Backend(model)).context("run failed")), USAGE);
        let gone = crate::backend::Error::Gone { what: "local trainer", reason: "it panicked".into() };
        assert_eq!(for_error(&anyhow::Error::new(crate::engine::Error::Backend(gone))), INTERNAL);
        let tensor = crate::backend::Error::from(candle_core::Error::Msg("shape mismatch".into()));
        assert_eq!(for_error(&anyhow::Error::new(tensor)), INTERNAL);
        let strict = crate::sandbox::Error::Incomplete { missing: vec!["no user namespaces".into()] };
        assert_eq!(for_error(&anyhow::Error::new(strict).context("cannot start the sandbox")), USAGE);
        let worker = crate::sandbox::Error::Worker { slot: 0, reason: "died".into(), stderr: String::new() };
        assert_eq!(for_error(&anyhow::Error::new(worker)), INTERNAL);
        // A typed cause decides before the I/O error under it.
        let read = crate::runlog::Error::Io { op: "read", path: "runs/x/status.json".into(), source: io(std::io::ErrorKind::NotFound) };
        assert_eq!(for_error(&anyhow::Error::new(read)), INTERNAL);
        // Only context above an I/O error: a missing file is the user's, other failures are not.
        assert_eq!(for_error(&anyhow::Error::new(io(std::io::ErrorKind::NotFound)).context("cannot read `c.jsonl`")), USAGE);
        assert_eq!(for_error(&anyhow::Error::new(io(std::io::ErrorKind::PermissionDenied)).context("cannot write")), INTERNAL);
        assert_eq!(for_error(&anyhow::anyhow!("something odd")), INTERNAL);
        assert_eq!(for_error(&super::UserError::msg("`--timeout` must be positive")), USAGE);
        assert_eq!(for_error(&anyhow::Error::new(io(std::io::ErrorKind::BrokenPipe)).context("writing verdicts")), OK);
    }
}
