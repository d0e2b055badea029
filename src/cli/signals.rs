//! SIGINT and SIGTERM: one path for every long-running command (`rlx run`, `eval`, `sweep`,
//! `serve`, `sandbox serve`).
//!
//! Both signals mean the same: a terminal sends SIGINT where Slurm, systemd, container runtimes
//! and `timeout` send SIGTERM. The first asks the command to stop cleanly (a run checkpoints and
//! records `interrupted`, a server stops accepting and drains, a sweep passes the request on to
//! its runs); the second quits at once, exit 130, after removing the process's sandbox
//! directories.
//!
//! The signals are awaited on a thread of their own, with its own small runtime, rather than as
//! a task of the command's runtime: a task needs a free worker, and synchronous work holding
//! every worker (prompt rendering did) kept `rlx run` from seeing SIGTERM for ten minutes.

use anyhow::Context as _;

/// `cli::exit::INTERRUPTED`, written out: this module names nothing of `cli` (it would join the
/// parent↔child cycle the architecture test tolerates for the commands and the printer only).
const INTERRUPTED: i32 = 130;

/// Calls `handler` with 0 for the first SIGINT or SIGTERM, 1 for the second, and so on, on a
/// thread of its own. Returns once the signals are caught.
///
/// # Errors
/// The thread or its signal handlers cannot be set up.
pub(crate) fn on_signals(mut handler: impl FnMut(u32) + Send + 'static) -> anyhow::Result<()> {
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<std::io::Result<()>>();
    std::thread::Builder::new()
        .name("rlx-signals".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_io().build() {
                Ok(rt) => rt,
                Err(e) => {
                    let _ = ready_tx.send(Err(e));
                    return;
                }
            };
            rt.block_on(async move {
                use tokio::signal::unix::{SignalKind, signal};
                let (mut int, mut term) = match (signal(SignalKind::interrupt()), signal(SignalKind::terminate())) {
                    (Ok(int), Ok(term)) => (int, term),
                    (Err(e), _) | (_, Err(e)) => {
                        let _ = ready_tx.send(Err(e));
                        return;
                    }
                };
                let _ = ready_tx.send(Ok(()));
                for n in 0.. {
                    tokio::select! {
                        _ = int.recv() => {}
                        _ = term.recv() => {}
                    }
                    handler(n);
                }
            });
        })
        .context("cannot start the signal thread")?;
    ready_rx.recv().context("the signal thread ended")?.context("cannot catch SIGINT and SIGTERM")
}

/// The policy of runs: the first signal calls `first`, the second quits at once.
///
/// # Errors
/// As [`on_signals`].
pub(crate) fn on_stop(first: impl FnOnce() + Send + 'static) -> anyhow::Result<()> {
    let mut first = Some(first);
    on_signals(move |_| match first.take() {
        Some(f) => f(),
        None => quit_now(),
    })
}

/// The policy of servers: a future that completes on the first signal (the server stops
/// accepting and drains), after `notice` (what to tell the user); the second quits at once.
///
/// # Errors
/// As [`on_signals`].
pub(crate) fn shutdown(notice: impl FnOnce() + Send + 'static) -> anyhow::Result<impl Future<Output = ()> + Send + 'static> {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    on_stop(move || {
        notice();
        let _ = tx.send(());
    })?;
    Ok(async move {
        let _ = rx.await;
    })
}

/// Exits now with code 130, removing the process's sandbox directories first (nothing else
/// will: destructors do not run on `exit`).
pub(crate) fn quit_now() -> ! {
    crate::sandbox::local::remove_temp_dirs();
    std::process::exit(INTERRUPTED)
}
