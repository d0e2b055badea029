//! The embedded backend: sample and train small Llama/Qwen2/Qwen3 models in-process with candle
//! on the CPU, with Tinker's datum format and loss definitions.
//!
//! - [`model`]: the differentiable transformer (parameters as `Var`s, KV-cache inference path).
//! - [`lora`]: low-rank adapters; [`frozen`]: the gradient-free product for frozen base weights;
//!   [`target_logprob`]: the fused log-prob-of-target op with its own backward; [`loss_tensor`]:
//!   the losses of `rl::loss` as differentiable tensors.
//! - [`load`]: Hugging Face directories and GGUF files (chat templates render with `prompt::chat`).
//! - [`sampler`]: [`LocalSampler`], batched KV-cache generation (its docs define the logprobs);
//!   [`decode`]: its hand-written decoding path on quantised weights with continuous batching;
//!   [`quant`]: which quantised copies (the GGUF's own blocks, Q8_0) it decodes with.
//! - [`trainer`]: [`LocalTrainer`], forward/backward, AdamW ([`optim`]), state ([`state`]);
//!   [`train_pass`]: its hand-written f32 forward and backward (candle's autograd stays for f64);
//!   [`pack`]: its micro-batches, with the prompt a GRPO group shares packed once per row.
//!
//! - [`handle`]: the backend behind the async seams: [`open`] loads the model on a thread that
//!   owns the trainer; requests queue to it ([`worker`]) in submission order.
//!
//! Threading ([`cpu`] sets candle's pools up at start-up): the trainer lives on its own thread, each sampler snapshot on another;
//! candle parallelises each matmul over the cores itself (rayon).

mod candle_error;
pub mod cpu;
pub(crate) mod decode;
pub(crate) mod frozen;
pub(crate) mod handle;
pub mod load;
pub(crate) mod loss_tensor;
pub(crate) mod lora;
pub mod model;
pub(crate) mod optim;
pub(crate) mod pack;
pub(crate) mod pick;
pub(crate) mod options;
pub mod quant;
pub(crate) mod sampler;
pub(crate) mod state;
pub(crate) mod target_logprob;
pub(crate) mod teacher;
pub(crate) mod train_pass;
pub(crate) mod trainer;
mod worker;

pub use handle::{Options, SamplerHandle, TrainerHandle, open, policy_of};
pub use load::{Loaded, load};
pub use lora::LoraConfig;
pub use model::{Arch, Config, Model, Tuning};
pub use quant::SampleWeights;
pub use sampler::LocalSampler;
pub use trainer::{LocalTrainer, TrainerOptions};

#[cfg(test)]
mod pack_tests;
