//! The single integration-test binary. Each module covers one area through the real `rlx` binary
//! or the library's public API.

/// Dataset files and format adapters (src/data).
mod data;
/// The local sandbox: dataset grading, LiveCodeBench conformance, adversarial programs.
mod sandbox;
