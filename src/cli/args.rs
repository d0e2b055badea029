//! The command line's grammar: [`Cli`] and its [`Command`]s. Doc comments are the `--help`
//! text. Each subcommand's own arguments live beside it in `commands/` (so a command names
//! nothing back up here), and `commands::dispatch` is the one reader of this enum.

use clap::{Parser, Subcommand};

use super::commands::{compare, doctor, eval, export, grade, render, run, sandbox, serve, show, sweep, sync, validate};

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
    Validate(validate::ValidateArgs),
    /// Print the JSON Schema of experiment specs (what `schemas/experiment.schema.json` holds).
    Schema,
    /// Show the prompts a run would send, exactly as the model sees them, with token counts.
    Render(render::RenderArgs),
    /// Run an experiment: validate, plan, then train and evaluate into `runs/<run-id>/`.
    Run(run::RunArgs),
    /// Run a grid of experiments: `rlx sweep [SPEC] lr=[1e-5,4e-5] group_size=8,16 seed=[0,1,2]`.
    ///
    /// Without SPEC, `experiments/default.yaml` is used. Each grid point is a run whose id hashes
    /// its resolved spec, so re-launching a sweep skips finished runs and resumes the others.
    /// `--sample N` draws N configurations from ranges (`lr=loguniform(1e-6,1e-4)`) instead;
    /// `--launcher slurm` submits the members as one Slurm job array; `rlx sweep status
    /// SWEEP_DIR` shows where each member is (docs/sweeps.md).
    Sweep(sweep::SweepArgs),
    /// Grade completions against a problem file in the sandbox; one JSON line per completion.
    Grade(grade::GradeArgs),
    /// The code sandbox: run a Sandbox-Fusion-compatible server.
    #[command(subcommand)]
    Sandbox(sandbox::SandboxCommand),
    /// Serve Tinker's REST API over the embedded trainer, for the Tinker Python SDK and rlx's
    /// Tinker backend.
    Serve(serve::ServeArgs),
    /// Compare runs: config diff, arms over seeds with 95% intervals, paired tests on shared eval
    /// problems (bootstrap, exact McNemar), pass@k; `--html` and `--png` for charts.
    ///
    /// `rlx compare runs/*`, `rlx compare sweeps/<id>`, `rlx compare runs/<id> --steps -1,last`.
    /// Statistics and how to read them: docs/compare.md.
    Compare(compare::CompareArgs),
    /// Show a run's completions: prompt, completion, extracted code, per-test verdicts.
    ///
    /// `rlx show runs/<id>` (the last step), `rlx show runs/<id> --step 3 --failed`,
    /// `rlx show runs/<id> --problem 17` (every step it was drawn at), `rlx show runs/<id> --eval
    /// --step base` (the baseline evaluation). Colour on a terminal, plain when piped or with
    /// `NO_COLOR`.
    Show(show::ShowArgs),
    /// Evaluate a model: pass@k (unbiased estimator) with confidence intervals on a problem set.
    ///
    /// `rlx eval SPEC [KEY=VALUE...]` evaluates a spec's policy on its `data.eval`;
    /// `rlx eval --model M --data FILE` builds the spec from flags; `rlx eval RUN_DIR[@STEP]`
    /// evaluates a run's checkpoint under the run's spec (`RUN_DIR@base`: its base model). Every
    /// way the run directory holds the per-problem results (`eval_results.jsonl`), like any run's.
    Eval(eval::EvalArgs),
    /// Export a checkpoint for other tools: merged weights as a Hugging Face directory
    /// (transformers, vLLM) or a GGUF file (llama.cpp), or a PEFT LoRA adapter.
    ///
    /// `rlx export runs/<id> --out model/`, `rlx export runs/<id>@11 --format gguf --dtype q8_0
    /// --out gguf/`, `rlx export runs/<id> --adapter-only --out adapter/`; a Tinker checkpoint is
    /// downloaded first: `rlx export tinker://RUN/weights/NAME --out model/`. See docs/export.md.
    Export(export::ExportArgs),
    /// Check a run directory against the reference's smoke-test expectations (format up early,
    /// reward and correctness trending up, eval above the baseline, scaled to the run's length)
    /// and list every diagnostic signal that fires over it, with evidence and remedy.
    ///
    /// `rlx doctor runs/<id>`; works on a running run. Signals and thresholds: docs/diagnostics.md.
    Doctor(doctor::DoctorArgs),
    /// Mirror run directories into an experiment tracker after the fact:
    /// `rlx sync {wandb|tensorboard|mlflow} RUN_DIR...`.
    ///
    /// Sends the steps the tracker has not had (all of them for a run made before the tracker
    /// was configured); never a step twice. Exits 3 if some steps could not be sent.
    #[command(subcommand)]
    Sync(sync::SyncCommand),
}
