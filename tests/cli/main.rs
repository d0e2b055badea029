//! The single integration-test binary. Each module covers one area through the real `rlx` binary
//! or the library's public API.

// The local candle trainer backend on tiny random models (numpy reference, finite differences,
// KV cache, resume, GRPO learning) and on SmolLM2-135M from its GGUF.
mod trainer;
mod trainer_smollm2;
