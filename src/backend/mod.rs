//! Backends: the `Sampler` and `Trainer` seams of design §3, the wire-level data they exchange,
//! and [`open`], the one place that turns a resolved spec into a backend.
//!
//! The data the seams exchange ([`crate::seam`]) mirror Tinker's, so that a spec means the same
//! objective on every backend.
//!
//! Implementations: [`local`] (candle, in-process, CPU), [`openai`] (an OpenAI-compatible
//! server, sampling only). Each is one module and one arm of [`open`].
//!
//! # Submission order and requests in flight
//! Every seam method *submits* its request when it is called and returns a [`Pending`] reply:
//! the engine can keep many sample requests in flight, and submit `forward_backward` and
//! `optim_step` back to back before awaiting either (Tinker pipelines exactly that). A backend
//! serves one trainer's requests in the order they were submitted. Rejected alternative: `async
//! fn` in the traits — an async fn does nothing until polled, so two calls joined together would
//! be submitted in whatever order the executor polls them, and `dyn Trainer` would not be
//! object-safe. The local backend is a handle to a thread that owns the model.

pub mod contract;
mod error;
pub mod local;
pub(crate) mod model_source;
mod open;
pub mod openai;
pub mod tinker;
mod traits;

pub use error::{Error, Result};
pub use open::{BackendChoice, Context, OpenOptions, open};
pub use traits::{ChatRequest, Pending, Policy, Sampler, Trainer};
