//! The single integration-test binary. Each module covers one area through the real `rlx` binary
//! or the library's public API.
