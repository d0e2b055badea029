//! The command line: clap types (doc comments are the `--help` text), one module per subcommand
//! under `commands/`, and the output policy (`printer`, `diagnostics`). The only module that
//! prints, owns the tracing subscriber, or knows about exit codes.

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

pub mod commands;
pub mod diagnostics;
pub mod printer;
pub mod progress;

/// Exit codes, documented in `rlx --help`.
pub mod exit {
    /// Success.
    pub const OK: u8 = 0;
    /// The run finished but failed a gate set in the spec (or a sweep member failed).
    pub const GATE: u8 = 1;
    /// Bad spec or bad arguments.
    pub const USAGE: u8 = 2;
    /// Internal or infrastructure error.
    pub const INTERNAL: u8 = 3;
    /// Interrupted (SIGINT/SIGTERM).
    pub const INTERRUPTED: u8 = 130;
}

const AFTER_HELP: &str = "\
Exit codes: 0 success, 1 a gate in the spec (or a sweep member) failed, 2 bad spec or arguments,
3 internal error, 130 interrupted.

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
    Sweep(SweepArgs),
    /// Grade completions against a problem file in the sandbox; one JSON line per completion.
    Grade(commands::grade::GradeArgs),
    /// The code sandbox: run a Sandbox-Fusion-compatible server.
    #[command(subcommand)]
    Sandbox(commands::sandbox::SandboxCommand),
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
}

/// `rlx sweep`.
#[derive(Debug, Args)]
pub struct SweepArgs {
    /// An optional spec file (default `experiments/default.yaml`), then axes (`key=[a,b]`,
    /// `key=a,b`) and fixed overrides (`key=value`).
    #[arg(value_name = "[SPEC] KEY=VALUES")]
    pub args: Vec<String>,
    /// Print the runs (id, status and the keys that differ) without running them.
    #[arg(long)]
    pub dry_run: bool,
    /// Runs at once.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub max_parallel: u32,
}

fn parse_probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&p) { Ok(p) } else { Err(format!("a pass rate is between 0 and 1, found {p}")) }
}

/// Parses the command line, runs the command, maps the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    match commands::dispatch(cli) {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            printer::error(&err);
            ExitCode::from(exit::INTERNAL)
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
