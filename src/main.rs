//! The `rlx` binary: a shim over [`rlx::cli::main`], so all logic lives in the library where
//! integration tests and other front-ends can reach it.

/// Large tensors freed at the end of a step are reused by the next one (see `rlx::alloc`).
#[global_allocator]
static ALLOC: rlx::alloc::ReuseLarge = rlx::alloc::ReuseLarge::new();

fn main() -> std::process::ExitCode {
    // SAFETY: first statements of `main`; no other thread exists yet. `.env` goes first so its
    // `RLX_*` settings are seen by the configuration below.
    let dotenv = unsafe { rlx::dotenv::load(std::path::Path::new(".")) };
    // SAFETY: as above.
    unsafe { rlx::backend::local::cpu::configure() };
    rlx::alloc::configure(&ALLOC);
    rlx::cli::main(dotenv)
}
