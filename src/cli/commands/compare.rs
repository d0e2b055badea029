//! `rlx compare PATH... [--metric M]... [--at STEP] [--steps A,B] [--baseline ARM] [--sort KEY]
//! [--margin PP] [--format table|md|csv|json] [--html FILE] [--png DIR]`.

use std::path::PathBuf;

use anyhow::Context;
use clap::{Args, ValueEnum};

use crate::cli::{exit, printer};
use crate::compare::{self, Options, StepSel, chart, html, png, table};

/// `rlx compare`.
#[derive(Debug, Args)]
pub struct CompareArgs {
    /// Run directories, sweep directories (`sweeps/<id>/`) or directories of runs (`runs/`).
    #[arg(required = true, value_name = "RUN_DIR|SWEEP_DIR")]
    pub paths: Vec<PathBuf>,
    /// A metric to report, repeatable; the first one decides (arms, ★, paired tests). Default:
    /// `eval/pass@1` (the smallest k logged) and `train/reward_mean`.
    #[arg(long = "metric", value_name = "NAME")]
    pub metrics: Vec<String>,
    /// Compare at this step (a number, `-1` for the baseline, `first` or `last`) instead of the
    /// last step that every finished run logged the metric at.
    #[arg(long, value_name = "STEP", allow_hyphen_values = true)]
    pub at: Option<StepSel>,
    /// Within-run paired test between two eval steps, e.g. `-1,last` (did training help, or is it
    /// noise?). Default for up to 4 runs: first and last eval.
    #[arg(long, value_name = "A,B", allow_hyphen_values = true, value_parser = parse_steps)]
    pub steps: Option<(StepSel, StepSel)>,
    /// The reference arm the others are compared against: an arm label (`lr=0.0001`, or its
    /// letter `B` when several keys differ), a run number (`#2`) or a run id (or a unique
    /// prefix). Default: the arm of the first run given.
    #[arg(long, value_name = "ARM|#N|RUN_ID")]
    pub baseline: Option<String>,
    /// Row order: `run`, `status`, `steps`, `wall`, `tokens`, or one of the `--metric`s (best
    /// first). Default: as given.
    #[arg(long, value_name = "KEY")]
    pub sort: Option<String>,
    /// Output format on stdout.
    #[arg(long, value_enum, default_value_t = Format::Table)]
    pub format: Format,
    /// Also write a self-contained HTML report (charts and tables; opens without network).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
    /// Also write every chart as a PNG into this directory.
    #[arg(long, value_name = "DIR")]
    pub png: Option<PathBuf>,
    /// Bootstrap resamples for the paired intervals.
    #[arg(long, value_name = "N", default_value_t = 10_000, value_parser = clap::value_parser!(u32).range(100..=1_000_000))]
    pub bootstrap: u32,
    /// Seed of the bootstrap's random numbers (same seed, same intervals).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub seed: u64,
    /// Also test equivalence within ±PP percentage points (two one-sided tests): "equivalent"
    /// is said only when both reject, never from a non-significant difference.
    #[arg(long, value_name = "PP", value_parser = parse_margin)]
    pub margin: Option<f64>,
}

fn parse_margin(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(v) if v > 0.0 && v < 100.0 => Ok(v / 100.0),
        _ => Err(format!("`{s}` is not a margin in percentage points between 0 and 100 (e.g. `5`)")),
    }
}

/// `--format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Format {
    /// Aligned tables for a terminal (100 columns, or `$COLUMNS`).
    Table,
    /// Markdown.
    Md,
    /// One CSV row per run.
    Csv,
    /// The whole report as JSON.
    Json,
}

fn parse_steps(s: &str) -> Result<(StepSel, StepSel), String> {
    let (a, b) = s.split_once(',').ok_or_else(|| format!("`{s}` is not two steps `A,B` (e.g. `-1,last`)"))?;
    Ok((a.parse()?, b.parse()?))
}

pub(crate) fn run(args: CompareArgs) -> anyhow::Result<u8> {
    let mut warnings = vec![];
    let runs = compare::collect(&args.paths, &mut warnings)?;
    let opts = Options {
        metrics: args.metrics,
        at: args.at,
        steps: args.steps,
        baseline: args.baseline,
        sort: args.sort,
        resamples: args.bootstrap as usize,
        seed: args.seed,
        margin: args.margin,
    };
    let mut report = match compare::build(runs, &opts) {
        Ok(r) => r,
        Err(e @ compare::Error::UnknownMetric { .. }) => {
            let hint = match &e {
                compare::Error::UnknownMetric { suggestion: Some(s), .. } => format!("did you mean `{s}`?"),
                _ => "metric names are the keys of metrics.jsonl, e.g. `eval/pass@1`, `train/reward_mean`".into(),
            };
            printer::error_chain(&e, &[hint]);
            return Ok(exit::USAGE);
        }
        Err(e) => return Err(e.into()),
    };
    report.warnings.splice(0..0, warnings);
    let blocks = table::blocks(&report);
    let width = std::env::var("COLUMNS").ok().and_then(|c| c.parse().ok()).filter(|&w: &usize| w >= 60).unwrap_or(100);
    printer::out(match args.format {
        Format::Table => table::text(&blocks, width).trim_end().to_string(),
        Format::Md => table::markdown(&blocks).trim_end().to_string(),
        Format::Csv => table::csv(&report).trim_end().to_string(),
        Format::Json => serde_json::to_string_pretty(&report).expect("reports serialise"),
    });
    if args.html.is_some() || args.png.is_some() {
        let scenes = chart::scenes(&report);
        if let Some(path) = &args.html {
            std::fs::write(path, html::render(&report, &blocks, &scenes)).map_err(|source| compare::Error::Write { path: path.clone(), source })?;
            printer::status(format!("wrote {}", path.display()));
        }
        if let Some(dir) = &args.png {
            std::fs::create_dir_all(dir).with_context(|| format!("cannot create `{}`", dir.display()))?;
            for (stem, scene) in &scenes {
                let path = dir.join(format!("{stem}.png"));
                std::fs::write(&path, png::render(scene)).map_err(|source| compare::Error::Write { path: path.clone(), source })?;
            }
            printer::status(format!("wrote {} chart(s) to {}", scenes.len(), dir.display()));
        }
    }
    Ok(exit::OK)
}
