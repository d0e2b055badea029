//! The single integration-test binary (one link step, one place to look). Each module covers one
//! area through the real `rlx` binary or the library's public API:
//!
//! - `chat`: chat templates and tokenization against real Qwen3 files and HF's Python reference.
//! - `common`: `TestContext` (temp work dir, clean env, `rlx` command) and helpers.
//! - `validate`: `rlx validate` on good and bad specs, every error class, `--explain`.
//! - `schema`: `rlx schema` and the committed `schemas/experiment.schema.json` agree.
//! - `sweep`: `rlx sweep` grids, dry runs, skipping finished runs, sweep records.
//! - `run`: `rlx run` up to the engine boundary.
//! - `runlog`: run directory files, atomic writes, torn lines.
//! - `registry`: model files fetched once from npm/PyPI into a cache.
//! - `grammar`: property tests: override and sweep grammars never panic.

mod chat;
mod common;
mod grammar;
mod registry;
mod run;
mod runlog;
mod schema;
mod sweep;
mod validate;
