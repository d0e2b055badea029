//! The Tinker backend: rlx's own client of Tinker's HTTP protocol (as the `tinker` SDK 0.38.0
//! speaks it, [`crate::tinker`]), behind the [`Trainer`] and [`Sampler`] seams.
//!
//! | module | job |
//! |---|---|
//! | [`http`] | one request, the submission retry policy, URL joining, authentication |
//! | [`future`] | polling `retrieve_future` until a result is there |
//! | [`session`] | client config, `create_session`, heartbeats, `finish` |
//! | [`trainer`] | a LoRA training model: `seq_id` order, pipelined submission |
//! | [`sampler`] | a sampling session: `asample` with many requests in flight |
//! | [`convert`] | rlx's data to Tinker's protobuf and JSON and back |
//! | `teacher` | the models a trainer scores with: distillation teachers (on this server or another), the KL reference |
//! | [`profile`] | which server is at the URL (hosted Tinker, `rlx serve`, SkyRL, ...) and what it accepts |
//!
//! `options` ([`Options`]) and `open` ([`open`], [`open_sampler`]) hold what opening a policy
//! takes; `error` ([`Error`]) what can go wrong.
//!
//! What rlx does not implement: the JWT credential exchange (a service that asks for it gets a
//! clear error), zstd-compressed bodies (optional for clients), telemetry (rlx sends none),
//! custom losses, and images.
//!
//! [`Trainer`]: crate::backend::Trainer
//! [`Sampler`]: crate::backend::Sampler

pub(crate) mod convert;
pub(crate) mod error;
pub(crate) mod future;
pub(crate) mod http;
mod open;
mod options;
pub mod profile;
pub(crate) mod sampler;
pub(crate) mod session;
mod teacher;
pub(crate) mod trainer;

pub use error::Error;
pub use http::RetryPolicy;
pub use open::{lora_config, open, open_sampler};
pub use options::{DEFAULT_BASE_URL, DEFAULT_MAX_IN_FLIGHT, Options};
pub use profile::{Profile, Server, Wire};
pub use sampler::{SamplerOptions, TinkerSampler};
pub use session::Session;
pub use teacher::{Teacher, TeacherModel};
pub use trainer::TinkerTrainer;
