//! `rlx sandbox ...`: the Sandbox-Fusion-compatible server and the sandbox benchmark.
//!
//! `serve` binds, prints the protection in force and the address, and serves until Ctrl-C.
//! `bench` runs the workloads of issue 3 (trivial program; LiveCodeBench-style stdin problem with
//! 10 tests, passing and wrong on test 7; an infinite loop with a 1 s limit) at 1, 2, 4 and 8 in
//! flight and prints throughput, latency percentiles, CPU per request and processes left behind,
//! with `python -c pass` as the anchor.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use clap::Subcommand;

use crate::quantile::quantile_sorted;
use crate::cli::{exit, printer};
use crate::data::{IoCase, Problem, Tests};
use crate::http_server::ApiKey;
use crate::sandbox::server::ServerConfig;
use crate::sandbox::local::LocalConfig;
use crate::sandbox::proc_tree;
use crate::sandbox::{ExecRequest, GradeOptions, Grader as _, Limits, Sandbox as _, VerdictStatus};

/// `rlx sandbox` subcommands.
#[derive(Debug, Subcommand)]
pub enum SandboxCommand {
    /// Serve Sandbox Fusion's API (`POST /run_code` for python, `GET /v1/ping`) on the local sandbox.
    Serve {
        /// Address to listen on. Addresses other than loopback need `--api-key`.
        #[arg(long, default_value = "127.0.0.1:8080")]
        bind: SocketAddr,
        /// Require this key on every request, as `X-API-Key` or `Authorization: Bearer`
        /// (`RLX_SANDBOX_API_KEY`; rlx's Sandbox Fusion client sends that variable's value).
        #[arg(long, env = crate::switches::SANDBOX_API_KEY.name, hide_env_values = true)]
        api_key: Option<String>,
        /// Largest `memory_limit_MB` a request may ask for (more: HTTP 422).
        #[arg(long, default_value_t = 4096)]
        max_memory_mb: u64,
        /// Longest `run_timeout` a request may ask for, in seconds (more: HTTP 422).
        #[arg(long, default_value_t = 900.0)]
        max_run_timeout_s: f64,
        /// Programs using the CPU at once [default: cores].
        #[arg(long)]
        concurrency: Option<usize>,
        /// Programs in flight at once, counting those waiting (sleeping, blocked, sitting out a
        /// deadline) without using the CPU; each holds a warm worker [default: 4 × concurrency].
        #[arg(long)]
        max_in_flight: Option<usize>,
        /// Refuse to start when an isolation layer is unavailable.
        #[arg(long)]
        strict: bool,
        /// The protocol served: Sandbox Fusion's HTTP API, or the CoreWeave Sandbox (Aviato)
        /// gRPC service over plaintext HTTP/2, for the `cwsandbox` Python client
        /// (`CWSANDBOX_BASE_URL=http://ADDR`) and `sandbox.kind: cwsandbox`.
        #[arg(long, value_enum, default_value = "fusion")]
        protocol: Protocol,
    },
    /// Benchmark the local sandbox and print the workload table.
    Bench {
        /// Sandbox workers [default: cores].
        #[arg(long)]
        workers: Option<usize>,
        /// Requests per trivial workload point (LCB points use a quarter, loops 2 per slot).
        #[arg(long, default_value_t = 200)]
        requests: usize,
        /// In-flight levels.
        #[arg(long, value_delimiter = ',', default_value = "1,2,4,8")]
        inflight: Vec<usize>,
    },
}

/// What `rlx sandbox serve` speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Protocol {
    /// Sandbox Fusion: `POST /run_code`, `GET /v1/ping`.
    Fusion,
    /// CoreWeave Sandbox: `coreweave.sandbox.v1.SandboxService` over gRPC (h2c).
    Cwsandbox,
}

/// Run `rlx sandbox ...`.
pub(crate) fn run(cmd: SandboxCommand) -> anyhow::Result<u8> {
    let runtime = super::common::runtime()?;
    runtime.block_on(async {
        match cmd {
            SandboxCommand::Serve { bind, api_key, max_memory_mb, max_run_timeout_s, concurrency, max_in_flight, strict, protocol } => {
                let Some(caps) = server_config(bind, api_key, max_memory_mb, max_run_timeout_s) else { return Ok(exit::USAGE) };
                serve(bind, caps, concurrency, max_in_flight, strict, protocol).await
            }
            SandboxCommand::Bench { workers, requests, inflight } => bench(workers, requests, &inflight).await,
        }
    })
}

/// Starts the local sandbox as every command does, and shows what isolation is missing.
async fn start_local(config: LocalConfig) -> anyhow::Result<crate::sandbox::local::LocalSandbox> {
    let started = crate::sandbox::start::start_local(config).await.context("cannot start the local sandbox")?;
    for w in &started.warnings {
        printer::warning(w, &["pass `--strict` to refuse to run instead".into()]);
    }
    Ok(started.grader)
}

/// The server's key and caps, checked before anything starts: an empty key, a public bind
/// without a key or a cap that is not a positive number is a usage error (printed; `None`).
fn server_config(bind: SocketAddr, api_key: Option<String>, max_memory_mb: u64, max_run_timeout_s: f64) -> Option<ServerConfig> {
    let key = match api_key.clone().map(ApiKey::new).transpose() {
        Ok(k) => k,
        Err(e) => {
            printer::error_message(&format!("`--api-key`: {e}"), &["pass a non-empty key, or none to bind 127.0.0.1 only".into()]);
            return None;
        }
    };
    if let Err(e) = crate::http_server::check_bind(bind, key.as_ref()) {
        printer::error_message(&e.to_string(), &[e.hint()]);
        return None;
    }
    if !(max_run_timeout_s > 0.0 && max_run_timeout_s.is_finite()) || max_memory_mb == 0 {
        printer::error_message(&format!("`--max-run-timeout-s {max_run_timeout_s}` and `--max-memory-mb {max_memory_mb}` must be positive"), &[]);
        return None;
    }
    Some(ServerConfig { api_key, max_memory_mb, max_run_timeout: Duration::from_secs_f64(max_run_timeout_s), ..ServerConfig::default() })
}

async fn serve(bind: SocketAddr, caps: ServerConfig, concurrency: Option<usize>, max_in_flight: Option<usize>, strict: bool, protocol: Protocol) -> anyhow::Result<u8> {
    // The CoreWeave protocol's sandboxes are containers: a writable root each, kept between calls.
    let mut config = LocalConfig { strict, max_in_flight, persistent_roots: protocol == Protocol::Cwsandbox, ..LocalConfig::default() };
    if let Some(c) = concurrency {
        config.workers = c;
    }
    // Signals are caught before the sandbox's directories exist and before clients are told the
    // address: a SIGTERM at any point after this drains and removes them, none kills the process.
    let shutdown = crate::cli::signals::shutdown(|| printer::status("stopping (again to quit now)…"))?;
    let sandbox = start_local(config).await?;
    let listener = tokio::net::TcpListener::bind(bind).await.with_context(|| format!("cannot listen on `{bind}`"))?;
    let addr = listener.local_addr()?;
    let api = match protocol {
        Protocol::Fusion => "POST /run_code, GET /v1/ping",
        Protocol::Cwsandbox => "gRPC coreweave.sandbox.v1.SandboxService (h2c)",
    };
    printer::status(format!("rlx sandbox listening on http://{addr} ({} on the CPU, {} in flight); {api}", sandbox.workers(), sandbox.max_in_flight()));
    let preload = sandbox.preload();
    printer::status(format!("preloaded in the warm workers: {}", preload.modules.join(", ")));
    if let Some(why) = preload.missing.get("numpy") {
        printer::warning(
            &format!("numpy is not preloaded ({why}): submissions that import it (the LiveCodeBench harness does) pay for the import every time"),
            &[format!("install numpy for `{}`, or point RLX_PYTHON at an interpreter that has it", sandbox.python().display())],
        );
    }
    match protocol {
        Protocol::Fusion => crate::sandbox::server::serve_with(listener, sandbox, caps, shutdown).await.context("server failed")?,
        Protocol::Cwsandbox => {
            // The key was checked by `server_config`; the memory cap is the same flag for both protocols.
            let key = caps.api_key.as_deref().and_then(|k| ApiKey::new(k).ok());
            let mut options = cwsandbox_options()?;
            options.api_key = key;
            options.limits.max_memory_mb = caps.max_memory_mb;
            let stats = crate::sandbox::cwsandbox::server::serve(listener, sandbox, options, shutdown).await.context("server failed")?;
            printer::status(format!("rlx sandbox stopped: {} sandboxes created, {} alive, at most {} alive at once", stats.created, stats.alive, stats.peak));
        }
    }
    Ok(exit::OK)
}

/// The cwsandbox server's options; `RLX_CWSANDBOX_PENDING_S` (test-only: seconds a new sandbox
/// stays `PENDING`, `inf` for never) is how the tests reach a service whose sandboxes are slow
/// to start or never do.
fn cwsandbox_options() -> anyhow::Result<crate::sandbox::cwsandbox::server::ServeOptions> {
    let Some(v) = crate::switches::CWSANDBOX_PENDING_S.var() else { return Ok(Default::default()) };
    let secs: f64 = v.trim().parse().ok().filter(|s: &f64| *s >= 0.0).ok_or_else(|| crate::cli::error::UserError::msg(format!("`RLX_CWSANDBOX_PENDING_S` must be a number of seconds or `inf`, found `{v}`")))?;
    let pending = if secs.is_finite() { Duration::from_secs_f64(secs) } else { Duration::MAX };
    printer::warning(&format!("{} is set: new sandboxes stay PENDING for {v} s (a test setting)", crate::switches::CWSANDBOX_PENDING_S.name), &[]);
    Ok(crate::sandbox::cwsandbox::server::ServeOptions { pending: Some(pending), ..Default::default() })
}

/// The LCB-10 benchmark problem: `n` then `n` integers; print their sum and their max.
fn lcb10(wrong_on: Option<usize>) -> Problem {
    let cases = (0..10)
        .map(|i| {
            let n = 1000 + 400 * i;
            let xs: Vec<i64> = (0..n).map(|k| ((k * 7919 + i * 104_729) % 100_003) as i64 - 50_000).collect();
            let mut output = format!("{}\n{}\n", xs.iter().sum::<i64>(), xs.iter().max().copied().unwrap_or(0));
            if wrong_on == Some(i) {
                output = "0\n0\n".into();
            }
            let input = format!("{n}\n{}\n", xs.iter().map(i64::to_string).collect::<Vec<_>>().join(" "));
            IoCase { input, output }
        })
        .collect();
    Problem { id: "bench/lcb10".into(), statement: String::new(), starter_code: None, tests: Tests::Stdin { cases }, metadata: Default::default() }
}

const LCB10_SOLUTION: &str = "n = int(input())\nxs = list(map(int, input().split()))\nprint(sum(xs))\nprint(max(xs))\n";


/// CPU seconds of the workers, their long-lived helpers (the PID-namespace holders) and
/// everything those reaped, plus rlx itself.
fn cpu_seconds(workers: &[u32]) -> f64 {
    workers.iter().map(|w| proc_tree::cpu_seconds(&w.to_string())).sum::<f64>() + proc_tree::cpu_seconds("self")
}

/// Processes whose real uid is in `uids`: what a workload left behind.
fn processes_of(uids: &std::ops::Range<u32>) -> usize {
    let Ok(dir) = std::fs::read_dir("/proc") else { return 0 };
    dir.filter_map(Result::ok)
        .filter(|e| e.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit()))
        .filter(|e| {
            std::fs::read_to_string(e.path().join("status")).ok().and_then(|s| {
                s.lines().find(|l| l.starts_with("Uid:")).and_then(|l| l.split_whitespace().nth(1)?.parse::<u32>().ok())
            }).is_some_and(|u| uids.contains(&u))
        })
        .count()
}

async fn bench(workers: Option<usize>, requests: usize, inflight: &[usize]) -> anyhow::Result<u8> {
    let mut config = LocalConfig::default();
    if let Some(w) = workers {
        config.workers = w;
    }
    let sandbox = Arc::new(start_local(config).await?);
    let python = sandbox.python().to_owned();
    // The anchor: a bare interpreter start, as Sandbox Fusion pays per request.
    let mut anchor = Vec::new();
    for _ in 0..20 {
        let t = Instant::now();
        std::process::Command::new(&python).args(["-c", "pass"]).status().context("cannot run `python -c pass`")?;
        anchor.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    anchor.sort_by(f64::total_cmp);
    let anchor_ms = quantile_sorted(&anchor, 0.5);
    printer::out(format!("machine: {} cores; sandbox: {} workers; python: {}", std::thread::available_parallelism().map_or(0, |n| n.get()), sandbox.workers(), python.display()));
    printer::out(format!("protection: {}", serde_json::to_string(sandbox.protection())?));
    printer::out(format!("anchor: `python -c pass` p50 {anchor_ms:.1} ms"));
    printer::out("");
    printer::out("| workload | in flight | req/s | p50 ms | p95 ms | CPU ms/req | p50 / python -c pass | left behind |");
    printer::out("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let uids = sandbox.uid_range();
    let workloads: [(&str, usize); 4] = [
        ("trivial `print('hello')`", requests),
        ("LCB stdin, 10 tests, correct", requests.div_ceil(4)),
        ("LCB stdin, 10 tests, wrong on test 7", requests.div_ceil(4)),
        ("infinite loop, 1 s limit", 0),
    ];
    // Built once: the client's own work must not count as sandbox CPU.
    let problems = Arc::new([lcb10(None), lcb10(Some(6))]);
    for (wi, (name, n)) in workloads.iter().enumerate() {
        for &c in inflight {
            let n = if wi == 3 { 2 * c.max(sandbox.workers()) } else { *n };
            let pids = sandbox.worker_pids();
            let cpu0 = cpu_seconds(&pids);
            let started = Instant::now();
            let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let mut tasks = tokio::task::JoinSet::new();
            for _ in 0..c {
                let (sandbox, next, problems) = (sandbox.clone(), next.clone(), problems.clone());
                tasks.spawn(async move {
                    let mut lat = Vec::new();
                    let mut bad = 0usize;
                    while next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < n {
                        let t = Instant::now();
                        let ok = match wi {
                            0 => sandbox
                                .run(ExecRequest { code: "print('hello')".into(), ..Default::default() })
                                .await
                                .is_ok_and(|o| o.stdout == b"hello\n"),
                            1 | 2 => {
                                let v = sandbox.grade(&problems[wi - 1], LCB10_SOLUTION, &GradeOptions::default()).await;
                                v.status == if wi == 1 { VerdictStatus::Passed } else { VerdictStatus::Failed }
                            }
                            _ => {
                                let limits = Limits { timeout: Duration::from_secs(1), ..Limits::default() };
                                sandbox
                                    .run(ExecRequest { code: "while True: pass".into(), limits, ..Default::default() })
                                    .await
                                    .is_ok_and(|o| o.status == crate::sandbox::ExecStatus::TimedOut)
                            }
                        };
                        bad += usize::from(!ok);
                        lat.push(t.elapsed().as_secs_f64() * 1000.0);
                    }
                    (lat, bad)
                });
            }
            let mut lat = Vec::new();
            let mut bad = 0;
            while let Some(r) = tasks.join_next().await {
                let (l, b) = r?;
                lat.extend(l);
                bad += b;
            }
            let wall = started.elapsed().as_secs_f64();
            let cpu = cpu_seconds(&sandbox.worker_pids()) - cpu0;
            lat.sort_by(f64::total_cmp);
            let left = processes_of(&uids);
            let p50 = quantile_sorted(&lat, 0.5);
            printer::out(format!(
                "| {name}{} | {c} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1}x | {left} |",
                if bad > 0 { format!(" ({bad} unexpected)") } else { String::new() },
                lat.len() as f64 / wall,
                p50,
                quantile_sorted(&lat, 0.95),
                cpu * 1000.0 / lat.len().max(1) as f64,
                p50 / anchor_ms,
            ));
        }
    }
    Ok(exit::OK)
}
