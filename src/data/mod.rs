//! Problems: the model that prompting and grading share, and loaders for local dataset files.
//!
//! A [`Problem`] is what a grader needs: an id, the statement, optional starter code, and its
//! [`Tests`] in one of four shapes (stdin cases, functional cases with a function name, MBPP-style
//! assert scripts with setup code, a HumanEval `check` function). The format adapters in
//! [`formats`] turn rows of the common code-RL datasets (LiveCodeBench, CodeContests/TACO/APPS,
//! the DeepCoder subsets, MBPP, HumanEval) into problems; [`load_file`] reads a local `.json`
//! (one array) or `.jsonl` file and auto-detects the format row by row.
//!
//! Neighbours: `prompt` renders problems into messages; `sandbox` grades code against
//! `Problem::tests`. Spec sources (local `.parquet`, `hf://` datasets), their filters, the seeded
//! shuffle and the dataset fingerprint are in [`source`] and [`filter`].
//!
//! This file only declares and re-exports: the model is in `problem`, the loading error in
//! `error`, [`load_file`] in `file`, so the format adapters name a sibling, not their parent.

mod error;
mod file;
pub mod filter;
pub(crate) mod formats;
pub mod hf;
pub(crate) mod lcb_private;
pub(crate) mod parquet;
mod problem;
pub mod sft;
pub mod source;

pub use error::Error;
pub use file::load_file;
pub(crate) use file::parse_rows;
pub use formats::Format;
pub use problem::{IoCase, META_CATEGORY, META_CHECKER, META_CHECKER_PROGRAM, META_COMPILE_FLAGS, META_COMPILE_TIMEOUT, META_LANGUAGE, META_MEMORY_LIMIT, META_TIME_LIMIT, Problem, Tests};
pub use source::{Dataset, Loaded, load_data, load_source};
