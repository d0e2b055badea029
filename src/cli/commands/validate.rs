//! `rlx validate SPEC... [KEY=VALUE...] [--explain [--pilot-pass-rate P]]`.

use std::path::Path;

use clap::Args;

use super::common::{report_plan_error, split_args};
use crate::cli::{exit, printer};
use crate::engine;
use crate::plan::{Plan, explain};
use crate::rl::reward::Custom;
use crate::seam::Finetune;

pub(super) fn validate(args: ValidateArgs) -> anyhow::Result<u8> {
    let (specs, ovs) = match split_args(&args.args) {
        Ok(x) => x,
        Err(code) => return Ok(code),
    };
    if specs.is_empty() {
        printer::error_message("no spec file given", &["`rlx validate experiments/quickstart.yaml`".into()]);
        return Ok(exit::USAGE);
    }
    let mut code = exit::OK;
    let mut plans = vec![];
    for s in &specs {
        match super::common::plan_file(Path::new(s), &ovs) {
            Ok(plan) => {
                let rendered = render_templates_once(&plan);
                if rendered != exit::OK {
                    code = code.max(rendered);
                    continue;
                }
                printer::status(format!("ok: `{s}` is valid (run `{}`)", plan.run_id));
                if plan.python_reward.is_some() {
                    code = code.max(sample_python_reward(&plan)?);
                }
                plans.push(plan);
            }
            Err(e) => code = report_plan_error(&e),
        }
    }
    if args.explain {
        for plan in &plans {
            explain_plan(plan, args.pilot_pass_rate);
        }
        if plans.len() > 1 {
            let total: u64 = plans.iter().map(|p| explain::estimate(p, None).max_train_tokens).sum();
            printer::out(format!("total: {} runs, ≤ {} sampled training tokens", plans.len(), thousands(total)));
        }
    }
    Ok(code)
}

/// Renders the spec's prompt templates once on its first training problem, within the render
/// limits (`prompt::limits`): a template that cannot finish, writes too much or fails on real
/// data shows here rather than in the run. Exit code 2 when it fails; data that cannot be loaded
/// is left to the run to report (validating a spec does not require its data), and `hf://` data
/// is read from the cache only (validating downloads nothing).
fn render_templates_once(plan: &Plan) -> u8 {
    let mut options = crate::data::source::Options::from_env();
    options.hf.offline = true;
    let Ok(dataset) = crate::data::load_data(&plan.data, plan.seed, &options) else { return exit::OK };
    let Some(problem) = dataset.train.problems.first().or(dataset.eval.problems.first()) else { return exit::OK };
    let rendered = plan.prompt_templates().and_then(|t| t.render_once(problem, plan.rollout.max_attempts));
    match rendered {
        Ok(()) => exit::OK,
        Err(e) => {
            printer::error_chain(&e, &[format!("`rlx validate` renders each template once, on problem `{}`", problem.id)]);
            exit::USAGE
        }
    }
}

/// Calls the spec's Python reward once on a sample (the first training problem, a trivial
/// completion) in the local sandbox: a bug in it shows here, with its traceback, rather than
/// mid-run. Exit code 2 when the call fails or a `weighted` term names a component the
/// function did not return.
fn sample_python_reward(plan: &Plan) -> anyhow::Result<u8> {
    let sample = match super::common::runtime()?.block_on(engine::pyreward::sample_call(plan)) {
        Ok(Some(sample)) => sample,
        Ok(None) => return Ok(exit::OK),
        Err(e) => {
            let code = if e.is_user_error() { exit::USAGE } else { exit::INTERNAL };
            printer::error_chain(&e, &["`rlx validate` calls the Python reward once on the first training problem".into()]);
            return Ok(code);
        }
    };
    for w in &sample.warnings {
        printer::warning(&format!("the Python reward's sandbox: {w}"), &[]);
    }
    let what = format!("the Python reward `{}` in `{}`", sample.function, sample.file);
    match &sample.result {
        Ok(custom) => {
            let value = match custom {
                Custom::Components(parts) => {
                    let parts: Vec<String> = parts.iter().map(|(k, v)| format!("{k} = {v}")).collect();
                    format!("components {}", parts.join(", "))
                }
                other => format!("{}", other.total().unwrap_or(f64::NAN)),
            };
            if !sample.missing_components.is_empty() {
                let names: Vec<String> = sample.missing_components.iter().map(|c| format!("`{c}`")).collect();
                printer::error_message(
                    &format!("{what} returned {value} on problem `{}`, without the component(s) {} that `reward.terms` weigh", sample.problem, names.join(", ")),
                    &["a `python` term's `component` must be a key of the dict the function returns".into()],
                );
                return Ok(exit::USAGE);
            }
            printer::status(format!("ok: {what} returned {value} on problem `{}` (a trivial completion)", sample.problem));
            Ok(exit::OK)
        }
        Err(failure) => {
            let mut message = format!("{what} {failure}\n(called on problem `{}` with a trivial completion)", sample.problem);
            if !failure.traceback.is_empty() {
                message.push_str(&format!("\n{}", failure.traceback.trim_end()));
            }
            printer::error_message(&message, &["at run time a failing call is counted and its group dropped; the run stops after `reward.max_failures` failures".into()]);
            Ok(exit::USAGE)
        }
    }
}

fn explain_plan(plan: &Plan, pilot: Option<f64>) {
    let e = explain::estimate(plan, pilot);
    let backend = plan.backend.kind();
    let adapt = match &plan.model.finetune {
        Finetune::Lora(l) => format!("LoRA rank {}", l.rank),
        Finetune::Full => "full fine-tune".into(),
    };
    let mut lines = vec![
        format!("run {}", plan.run_id),
        format!("  directory       {}", plan.run_dir().display()),
        format!("  spec            {}", plan.written.path.display()),
    ];
    if !plan.written.overrides.is_empty() {
        lines.push(format!("  overrides       {}", plan.written.overrides.join(" ")));
    }
    lines.extend([
        format!("  model           {} ({adapt}) on `{backend}`", plan.model.base),
        format!("  steps           {}", e.steps),
        format!(
            "  per step        {} problems × {} completions = {} completions",
            e.prompts_per_step, e.group_size, e.completions_per_step
        ),
        format!(
            "  sampled tokens  ≤ {} per step (× max_tokens {}), ≤ {} over the run",
            thousands(e.max_tokens_per_step),
            plan.sampling.max_tokens,
            thousands(e.max_train_tokens)
        ),
    ]);
    if e.evals == 0 {
        lines.push("  evaluation      none (no `data.eval`)".into());
    } else {
        lines.push(format!(
            "  evaluation      {} evals × {} sample(s) per problem, pass@{:?}; ≤ {} tokens per eval problem",
            e.evals,
            e.eval_samples,
            plan.eval.k,
            thousands(e.max_eval_tokens_per_problem)
        ));
    }
    lines.push(format!("  checkpoints     every {} steps and at the end", plan.schedule.save_every));
    if let (Some(z), Some(useful), Some(p)) = (e.zero_advantage_share, e.expected_useful_groups, pilot) {
        lines.push(format!(
            "  pilot           p = {p}: zero-advantage groups p^G + (1-p)^G = {:.2}% → ~{useful:.2} of {} groups per step carry signal",
            z * 100.0,
            e.prompts_per_step
        ));
    }
    printer::out(lines.join("\n"));
}

/// `1234567` → `1,234,567`.
pub(super) fn thousands(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
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

fn parse_probability(s: &str) -> Result<f64, String> {
    let p: f64 = s.parse().map_err(|_| format!("`{s}` is not a number"))?;
    if (0.0..=1.0).contains(&p) { Ok(p) } else { Err(format!("a pass rate is between 0 and 1, found {p}")) }
}
