//! `rlx validate SPEC... [KEY=VALUE...] [--explain [--pilot-pass-rate P]]`.

use std::path::Path;

use super::{report_plan_error, split_args};
use crate::cli::{ValidateArgs, exit, printer};
use crate::plan::{self, Plan, explain};
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
        match plan::plan(Path::new(s), &ovs) {
            Ok(plan) => {
                printer::status(format!("ok: `{s}` is valid (run `{}`)", plan.run_id));
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
