//! Process-wide CPU settings for candle, made once at start-up before any thread exists.
//!
//! candle 0.11 runs large element-wise ops on its own "barrier pool": worker threads that, after
//! each job, spin for 25,000 iterations before parking, while the caller spins until every worker
//! is done. Its GEMM runs on rayon's pool instead. In a training step the two alternate hundreds
//! of times, so a pool worker kept spinning on a core that rayon's GEMM threads needed, and any
//! other process on the machine (the sandbox grading completions beside training) stalls the
//! caller's spin-wait on a descheduled worker: on 2 cores `perf` put 53% of a LoRA step's samples
//! in those spin loops, and the step took 20.5 s under load against 7.2 s without the pool's
//! workers (8.6 s with its spinning cut to 100 iterations; benches/trainer.rs, same load).
//! Without workers, element-wise ops run on the calling thread; GEMMs and the Q8_0 product
//! ([`super::quant`]) still use every core through rayon, whose work-stealing tolerates a busy
//! core.

/// Sets candle's thread settings unless the user already set them in the environment.
///
/// # Safety
/// Writes the process environment: call it before any other thread is started (first thing in
/// `main`), when nothing can read the environment concurrently.
pub unsafe fn configure() {
    if std::env::var_os("CANDLE_NUM_THREADS").is_none() {
        // SAFETY: the caller guarantees no other thread exists yet.
        unsafe { std::env::set_var("CANDLE_NUM_THREADS", "1") };
    }
}
