//! The single integration-test binary. Each module covers one area through the real `rlx` binary
//! or the library's public API.

/// Dataset files and format adapters (src/data).
mod data;
/// The local sandbox: dataset grading, LiveCodeBench conformance, adversarial programs.
mod sandbox;
/// `rlx sandbox serve` and the Sandbox Fusion client over real HTTP.
mod server;
/// `rlx grade` and `rlx sandbox serve` through the binary.
mod grade;
