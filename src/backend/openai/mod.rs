//! The OpenAI-compatible backend: a [`Sampler`](super::Sampler) over a vLLM, llama.cpp or other
//! server's `/v1/completions` (token ids or text prompts, with log-probabilities) or
//! `/v1/chat/completions` (text only; evaluation and dry runs). Sampling only: it cannot train.
//!
//! - [`client`]: HTTP: one `reqwest` client, a concurrency limit, per-request timeouts, retries
//!   with exponential back-off on infrastructure failures only.
//! - [`wire`]: the request bodies and the parsing of replies in the dialects servers speak.
//! - [`tokens`]: the server's completion tokens as our tokenizer's ids, checked against it.
//! - [`sampler`]: [`OpenaiSampler`], one HTTP request per completion (seeded per completion).
//! - `config` ([`Config`], [`Api`], [`PromptEncoding`]), `error` ([`Error`]) and `connect`
//!   ([`open`]): the settings, the failures, and the first contact with the server.
//!
//! Failure policy: a connection refused or reset, a timeout, HTTP 429 or 5xx, and a reply that
//! is garbage or truncated are retried; once the retries are spent the error is an
//! infrastructure error ([`Error::is_infrastructure`]), which the engine turns into a dropped,
//! counted group, never a zero reward. A 4xx other than 429 is the request's fault (a wrong
//! model name, a server that takes no token ids) and stops the run with a hint.

pub(crate) mod client;
mod config;
mod connect;
pub(crate) mod error;
pub(crate) mod sampler;
pub(crate) mod tokens;
pub mod wire;

pub use config::{Api, Config, PromptEncoding};
pub use connect::open;
pub use error::Error;
pub use sampler::OpenaiSampler;
