//! `rlx render SPEC [KEY=VALUE...] [--n 3] [--eval]`: the prompts a run would send, exactly as the
//! model sees them, with token counts and template hashes.

use std::path::Path;

use anyhow::Context;
use clap::Args;

use super::common::{report_plan_error, split_args};
use crate::cli::{exit, printer};
use crate::engine::prompting::Prompting;

pub(super) fn render(args: RenderArgs) -> anyhow::Result<u8> {
    let (specs, ovs) = match split_args(&args.args) {
        Ok(x) => x,
        Err(code) => return Ok(code),
    };
    let [spec_path] = specs.as_slice() else {
        printer::error_message("`rlx render` takes one spec file, then overrides", &[]);
        return Ok(exit::USAGE);
    };
    let plan = match super::common::plan_file(Path::new(spec_path), &ovs) {
        Ok(p) => p,
        Err(e) => return Ok(report_plan_error(&e)),
    };
    let dataset = crate::data::load_data(&plan.data, plan.seed, &crate::data::source::Options::from_env()).context("cannot load the problems")?;
    let set = if args.eval { dataset.eval } else { dataset.train };
    let list = set.problems;
    let prompting = Prompting::load(&plan).context("cannot load the model's tokenizer and chat template")?;

    let mut lengths = Vec::with_capacity(list.len());
    for (i, p) in list.iter().enumerate() {
        let r = prompting.first_turn(p).with_context(|| format!("cannot render problem `{}`", p.id))?;
        lengths.push(r.tokens.len());
        if i < args.n {
            // The tokens decoded: what the model sees, tool schemas included.
            let text = prompting.tokenizer.decode(&r.tokens, false)?;
            printer::out(format!("── problem {} ({}) · {} tokens ──", i, p.id, r.tokens.len()));
            printer::out(text);
        }
    }
    printer::out("──");
    for t in &plan.written.templates {
        printer::out(format!("template {:<16} {}  sha256:{}", t.role, t.path.display(), &t.sha256[..16]));
    }
    printer::out(format!("chat template    {}", plan.model.chat_template));
    if let (Some(min), Some(max)) = (lengths.iter().min(), lengths.iter().max()) {
        let mean = lengths.iter().sum::<usize>() as f64 / lengths.len() as f64;
        printer::out(format!("prompt tokens    min {min}  mean {mean:.1}  max {max}  over {} problems", lengths.len()));
        printer::out(format!("dataset          sha256:{}", &set.fingerprint[..16.min(set.fingerprint.len())]));
    }
    Ok(exit::OK)
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
