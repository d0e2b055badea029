//! The `rlx` binary: a shim over [`rlx::cli::main`], so all logic lives in the library where
//! integration tests and other front-ends can reach it.

fn main() -> std::process::ExitCode {
    rlx::cli::main()
}
