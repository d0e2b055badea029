//! Your model out of Tinker: `rlx export` of `tinker://` checkpoints (and of run directories of
//! runs on Tinker) against `rlx serve` on 127.0.0.1, which serves SDK 0.38's download protocol
//! (`save_weights_external`, `external_weights_urls`, signed URLs, `PUT …/ttl`, `DELETE`).
//!
//! - The official SDK (tinker==0.38.0) trains, saves a sampler and the state beside it, and
//!   downloads with its own `tinker checkpoint download`; `rlx export` of the same paths writes
//!   the same files byte for byte, and its merged export reproduces the saved sampler's
//!   log-probabilities (rlx's forward, and transformers/PEFT where that virtualenv exists).
//! - Without Python: a `rlx run` on Tinker exported by run directory (adapter, merged, GGUF),
//!   equal to the local export of the server's own checkpoint; every bad input exits 2 with
//!   nothing left behind: a sampler path, an unknown checkpoint, a non-empty output, no key,
//!   expired URLs.

// Tests report measured values on stderr by design.
#![allow(clippy::print_stderr)]

use std::path::{Path, PathBuf};

use rlx::backend::local::model::{Model, ParamBuilder, Tuning};
use serde_json::Value;

use crate::common::{Run, TestContext, jsonl, only_run, repo};
use crate::export::{hf_python, reference, rlx_logits};
use crate::tinker_sdk::{Server, sdk_python};

const KEY: &str = "tml-rlx-test";

fn tiny(cx: &TestContext) -> PathBuf {
    let dir = cx.path().join("tiny");
    crate::engine::tiny_model(&dir);
    dir
}

/// `rlx export ARGS` against `server` with the Tinker environment set.
fn export(cx: &TestContext, server: &Server, args: &[&str]) -> Run {
    Run::from(cx.rlx().arg("export").args(args).env("TINKER_BASE_URL", &server.url).env("TINKER_API_KEY", KEY).output().unwrap())
}

fn read(p: &Path) -> Vec<u8> {
    std::fs::read(p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn json(p: &Path) -> Value {
    serde_json::from_slice(&read(p)).unwrap()
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir).unwrap().flatten().map(|e| e.file_name().to_string_lossy().into_owned()).collect();
    v.sort();
    v
}

/// Log-probabilities of `tokens[1..]` under rlx's forward of the model files at `dir` (an HF
/// directory or a GGUF file), and the logits.
fn logprobs(dir: &Path, tokens: &[u32]) -> (Vec<f64>, Vec<Vec<f32>>) {
    let loaded = rlx::backend::local::load(dir).unwrap();
    let pb = ParamBuilder::new(&loaded.weights, &Tuning::Frozen, dir, 0);
    let logits = rlx_logits(&Model::new(&loaded.config, &pb).unwrap(), tokens);
    let lp = logits[..tokens.len() - 1]
        .iter()
        .zip(&tokens[1..])
        .map(|(row, &t)| {
            let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
            let sum: f64 = row.iter().map(|&x| (x as f64 - max).exp()).sum();
            row[t as usize] as f64 - max - sum.ln()
        })
        .collect();
    (lp, logits)
}

fn max_abs(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

#[test]
fn the_sdk_downloads_what_rlx_exports_and_the_merged_model_is_the_saved_sampler() {
    let Some(python) = sdk_python() else { return };
    let cx = TestContext::new();
    let model = tiny(&cx);
    let server = Server::start(&cx, &model, &[]);
    let sdk_dir = cx.path().join("sdk");
    let script = repo().join("tests/fixtures/tinker_sdk/download.py");
    let out = server.python(&python, &script).args(["tiny-model", sdk_dir.to_str().unwrap()]).current_dir(cx.path()).output().unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "the SDK script failed ({})\nstdout:\n{stdout}\nstderr:\n{stderr}", out.status);
    let s: Value = serde_json::from_str(stdout.lines().last().unwrap_or_default()).unwrap_or_else(|e| panic!("no summary ({e}):\n{stdout}\n{stderr}"));
    let text = |k: &str| s[k].as_str().unwrap().to_string();

    assert!(text("sampler_refusal").contains("Sampler checkpoints cannot be downloaded"), "{s}");
    let listed: Vec<(String, String)> = s["listed"].as_array().unwrap().iter().map(|c| (c[0].as_str().unwrap().into(), c[1].as_str().unwrap().into())).collect();
    for want in [("external", "external_weights/hf"), ("sampler", "sampler_weights/final"), ("training", "weights/final")] {
        assert!(listed.contains(&(want.0.into(), want.1.into())), "{want:?} not listed: {listed:?}");
    }
    assert!(s["listed"].as_array().unwrap().iter().all(|c| c[2] == true), "every checkpoint has a size: {s}");
    assert!(s["url_seconds_left"].as_f64().unwrap() > 3000.0, "URLs are signed for an hour: {s}");

    // rlx downloads the same paths through the same protocol: the same files, byte for byte.
    for key in ["state", "external"] {
        let d = &s["downloads"][key];
        let path = text(if key == "state" { "state_path" } else { "external_path" });
        let files: Vec<String> = serde_json::from_value(d["files"].clone()).unwrap();
        assert_eq!(files, ["adapter_config.json", "adapter_model.safetensors"], "{key}: a PEFT adapter");
        eprintln!("SDK download of {key} ({path}): {} bytes in {:.2} s", d["bytes"], d["seconds"].as_f64().unwrap());
        let out = format!("rlx-{key}");
        let r = export(&cx, &server, &[&path, "--adapter-only", "--out", &out]);
        assert_eq!(r.code, 0, "{}", r.stderr);
        for f in &files {
            assert_eq!(read(&cx.path().join(&out).join(f)), read(&Path::new(d["dir"].as_str().unwrap()).join(f)), "{key}: {f} differs from the SDK's download");
        }
        assert_eq!(names(&cx.path().join(&out)), ["README.md", "adapter_config.json", "adapter_model.safetensors", "rlx_export.json"]);
        assert_eq!(json(&cx.path().join(&out).join("rlx_export.json"))["tinker_path"], path.as_str());
        assert!(std::fs::read_to_string(cx.path().join(&out).join("README.md")).unwrap().contains(&path));
    }
    // The state and the external export were saved at the same step: the same adapter.
    assert_eq!(read(&cx.path().join("rlx-state/adapter_model.safetensors")), read(&cx.path().join("rlx-external/adapter_model.safetensors")));

    // Merged into the base: the same weights as the local export of the server's own sampler
    // checkpoint, and the saved sampler's log-probabilities (through the SDK) within 1e-4.
    let r = export(&cx, &server, &[&text("state_path"), "--base", "./tiny", "--out", "merged"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let server_ck = cx.path().join("state/models").join(text("model_id")).join("sampler_weights/final");
    let r = cx.run(&["export", server_ck.to_str().unwrap(), "--out", "local"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(read(&cx.path().join("merged/model.safetensors")), read(&cx.path().join("local/model.safetensors")), "merged weights differ from the server checkpoint's");
    let prompt: Vec<u32> = serde_json::from_value(s["prompt"].clone()).unwrap();
    let sampler: Vec<f64> = serde_json::from_value(s["sampler_logprobs"].clone()).unwrap();
    let (ours, logits) = logprobs(&cx.path().join("merged"), &prompt);
    let d = max_abs(&ours, &sampler);
    eprintln!("merged export vs the saved sampler (compute_logprobs): max |Δlogprob| = {d:.2e}");
    assert!(d < 1e-4, "the merged export's log-probabilities differ from the saved sampler's by {d}");
    let (base_lp, _) = logprobs(&model, &prompt);
    assert!(max_abs(&base_lp, &sampler) > 1e-2, "training moved the model away from the base");

    let r = export(&cx, &server, &[&text("external_path"), "--format", "gguf", "--base", "./tiny", "--out", "gguf"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    let (from_gguf, _) = logprobs(&cx.path().join("gguf/model-f32.gguf"), &prompt);
    assert!(max_abs(&from_gguf, &sampler) < 1e-4, "the GGUF export reads back {} away", max_abs(&from_gguf, &sampler));

    if let Some(hf) = hf_python() {
        let tokens = serde_json::to_string(&prompt).unwrap();
        let flat = |v: &Value| -> Vec<f64> { serde_json::from_value::<Vec<Vec<f64>>>(v.clone()).unwrap().concat() };
        let ours: Vec<f64> = logits.concat().into_iter().map(f64::from).collect();
        let theirs = flat(&reference(&hf, &["hf", cx.path().join("merged").to_str().unwrap(), &tokens]));
        let peft = flat(&reference(&hf, &["peft", model.to_str().unwrap(), cx.path().join("rlx-state").to_str().unwrap(), &tokens]));
        eprintln!("transformers on the merged export vs rlx: {:.2e}; PEFT on the downloaded adapter: {:.2e}", max_abs(&ours, &theirs), max_abs(&ours, &peft));
        assert!(max_abs(&ours, &theirs) < 1e-4 && max_abs(&ours, &peft) < 1e-4);
    }

    // What the SDK's download asked for, in the server's record (tokens redacted).
    let record = server.record();
    let seen = |method: &str, tail: &str| record.iter().any(|l| l["method"] == method && l["path"].as_str().unwrap().ends_with(tail) && l["status"] == 200);
    for (method, tail) in [("POST", "/save_weights_external"), ("GET", "/external_weights_urls"), ("PUT", "/external_weights/download/ttl"), ("DELETE", "/external_weights/download"), ("GET", "/adapter_model.safetensors")] {
        assert!(seen(method, tail), "no successful {method} …{tail} in the record");
    }
    assert!(record.iter().filter(|l| l["path"].as_str().unwrap().starts_with("/files/")).all(|l| l["path"].as_str().unwrap().starts_with("/files/…/")), "tokens are not recorded");
}

#[test]
fn a_tinker_run_exports_by_run_directory_and_bad_tinker_exports_exit_2() {
    let cx = TestContext::new();
    let model = tiny(&cx);
    let server = Server::start(&cx, &model, &[]);
    cx.write("spec.yaml", &crate::tinker::spec(&server.url, 2, 1));
    let r = Run::from(cx.rlx().args(["run", "spec.yaml"]).env("TINKER_API_KEY", KEY).output().unwrap());
    assert_eq!(r.code, 0, "{}\n{}", r.stdout, r.stderr);
    let run = only_run(&cx);
    let cks = jsonl(&run.join("checkpoints.jsonl"));
    let last = cks.last().unwrap()["state_path"].as_str().unwrap().to_string();
    assert!(last.contains("/weights/"), "{last}");

    // By run directory: the run's service and key, its base model, its card.
    let run_s = run.to_str().unwrap();
    let started = std::time::Instant::now();
    let r = Run::from(cx.rlx().args(["export", run_s, "--adapter-only", "--out", "adapter"]).env("TINKER_API_KEY", KEY).env_remove("TINKER_BASE_URL").output().unwrap());
    assert_eq!(r.code, 0, "{}", r.stderr);
    eprintln!("rlx export of a Tinker run's adapter: {:.2} s", started.elapsed().as_secs_f64());
    let meta = json(&cx.path().join("adapter/rlx_export.json"));
    let prov = json(&run.join("provenance.json"));
    assert_eq!((meta["tinker_path"].as_str(), &meta["run_id"]), (Some(last.as_str()), &prov["run_id"]), "{meta}");
    let started = std::time::Instant::now();
    let r = export(&cx, &server, &[run_s, "--out", "merged"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    eprintln!("rlx export of a Tinker run, merged: {:.2} s; output {:?}", started.elapsed().as_secs_f64(), names(&cx.path().join("merged")));
    let r = export(&cx, &server, &[run_s, "--format", "gguf", "--dtype", "q8_0", "--out", "gguf"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(cx.path().join("gguf/model-q8_0.gguf").is_file());
    // The same weights as the local export of the server's own checkpoint.
    let p = rlx_path(&last);
    let server_ck = cx.path().join("state/models").join(&p.0).join("weights").join(&p.1);
    let r = cx.run(&["export", server_ck.to_str().unwrap(), "--out", "local"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert_eq!(read(&cx.path().join("merged/model.safetensors")), read(&cx.path().join("local/model.safetensors")));
    // The temporary exports were deleted after each download.
    let record = server.record();
    let deletes = record.iter().filter(|l| l["method"] == "DELETE" && l["status"] == 200).count();
    assert_eq!(deletes, 3, "one temporary export deleted per download");

    bad_inputs(&cx, &server, &last);
}

/// `tinker://RUN/weights/NAME` → (RUN, NAME).
fn rlx_path(p: &str) -> (String, String) {
    let rest = p.strip_prefix("tinker://").unwrap();
    let parts: Vec<&str> = rest.split('/').collect();
    (parts[0].to_string(), parts[2].to_string())
}

fn bad_inputs(cx: &TestContext, server: &Server, state: &str) {
    let sampler = state.replace("/weights/", "/sampler_weights/");
    let before = server.record().len();
    let r = export(cx, server, &[&sampler, "--out", "e1"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is a sampler checkpoint") && r.stderr.contains(state), "names the training checkpoint to use: {}", r.stderr);
    let r = export(cx, server, &[state, "--out", "adapter"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("is not an empty directory"), "{}", r.stderr);
    let r = Run::from(cx.rlx().args(["export", state, "--out", "e2"]).env("TINKER_BASE_URL", &server.url).env_remove("TINKER_API_KEY").output().unwrap());
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("TINKER_API_KEY"), "{}", r.stderr);
    let r = export(cx, server, &[state, "--adapter-only", "--base", "./tiny", "--out", "e2"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert_eq!(server.record().len(), before, "refused before any request");

    let unknown = format!("{}/weights/no-such-checkpoint", state.rsplitn(3, '/').nth(2).unwrap());
    let r = export(cx, server, &[&unknown, "--out", "e3"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains(&format!("Tinker has no checkpoint `{unknown}`")), "{}", r.stderr);

    // URLs that expire as they are signed: a second server on the same state directory.
    let expiring = Server::start(cx, &cx.path().join("tiny"), &["--signed-url-ttl-s", "0"]);
    let r = export(cx, &expiring, &[state, "--adapter-only", "--out", "e4"]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("expired before it was fetched"), "{}", r.stderr);
    let refused: Vec<u64> = expiring.record().iter().filter(|l| l["path"].as_str().unwrap().starts_with("/files/")).map(|l| l["status"].as_u64().unwrap()).collect();
    assert_eq!(refused, vec![403], "one fetch, refused as expired");

    for name in ["e1", "e2", "e3", "e4"] {
        assert!(!cx.path().join(name).exists(), "{name} was created");
    }
    for e in std::fs::read_dir(cx.path()).unwrap().flatten() {
        assert!(!e.file_name().to_string_lossy().contains("rlx-partial"), "left behind: {:?}", e.path());
    }
    serve_errors(server, state);
}

/// The server's answers to bad download requests: FastAPI bodies that say what is wrong.
fn serve_errors(server: &Server, state: &str) {
    let (run, name) = rlx_path(state);
    let get = |path: &str| -> (u16, Value) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        rt.block_on(async {
            let r = reqwest::Client::new().get(format!("{}{path}", server.url)).send().await.unwrap();
            (r.status().as_u16(), r.json::<Value>().await.unwrap_or(Value::Null))
        })
    };
    let (st, v) = get(&format!("/api/v1/training_runs/{run}/checkpoints/weights/{name}/external_weights_urls"));
    assert_eq!(st, 400, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("only `external_weights/` checkpoints have download URLs"), "{v}");
    let (st, v) = get(&format!("/api/v1/training_runs/{run}/checkpoints/external_weights/nope/external_weights_urls"));
    assert_eq!(st, 404, "{v}");
    assert!(v["detail"].as_str().unwrap().contains("not found"), "{v}");
    let (st, v) = get("/files/0123456789abcdef0123456789abcdef/adapter_config.json");
    assert_eq!(st, 404, "{v}");
    let (st, v) = get(&format!("/api/v1/training_runs/{run}/checkpoints"));
    assert_eq!(st, 200, "{v}");
    let ids: Vec<&str> = v["checkpoints"].as_array().unwrap().iter().map(|c| c["checkpoint_id"].as_str().unwrap()).collect();
    assert!(ids.contains(&format!("weights/{name}").as_str()) && !ids.iter().any(|i| i.starts_with("external_weights/")), "{ids:?}");
}
