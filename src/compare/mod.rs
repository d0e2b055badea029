//! `rlx compare`: which run is better, and how sure we can be.
//!
//! Data flows one way:
//!
//! ```text
//! run / sweep directories ──load──► [Run] ──report::build──► Report ──► table | md | csv | json
//!                                                                   └──► chart ──► svg (html) | png
//! ```
//!
//! - [`load`]: run and sweep directories through `runlog`'s typed readers, tolerant of live,
//!   failed and interrupted runs and torn last lines.
//! - [`configdiff`]: resolved specs flattened; the keys that differ.
//! - [`arms`]: runs that differ only in seed form an arm; curves averaged over seeds.
//! - [`stats`]: t intervals, Welch, exact McNemar, sign-flip test, paired bootstrap, Holm,
//!   equivalence (TOST).
//! - [`paired`]: per-problem comparisons on shared eval problems; pass@k for k = 1..n.
//! - [`pooled`]: an arm's seeds pooled per problem between two eval steps; pass@1 split into
//!   format rate and pass@1 given format.
//! - [`category`]: pass@1 by problem category for each arm between the same steps.
//! - [`select`]: the eval step a command line names, a metric's series in one run.
//! - [`metric`]: metric directions, units and number formats.
//! - [`report`]: the [`Report`], computed once.
//! - [`table`]: terminal table, Markdown, CSV, JSON.
//! - [`chart`], [`svg`], [`png`], [`font`]: charts as a small scene of shapes, drawn as SVG
//!   (inline in the HTML) or rasterised to PNG with the same embedded font.
//! - [`html`]: the self-contained HTML report.
//!
//! The statistics and how to read them: docs/compare.md.

pub(crate) mod arms;
pub(crate) mod category;
pub(crate) mod chart;
pub(crate) mod configdiff;
mod error;
pub(crate) mod font;
pub(crate) mod html;
pub(crate) mod load;
pub(crate) mod metric;
pub(crate) mod paired;
pub(crate) mod png;
pub(crate) mod pooled;
pub(crate) mod report;
pub(crate) mod select;
pub(crate) mod stats;
pub(crate) mod svg;
pub(crate) mod table;

pub(crate) use error::Error;
pub(crate) use load::collect;
pub(crate) use report::{Options, Report, build};
pub(crate) use select::StepSel;
