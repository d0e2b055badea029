//! The requests rlx's Tinker client sends match, field for field, the ones the official SDK
//! (tinker==0.38.0) sends for the same operations: both make a LoRA model, one
//! `importance_sampling` forward_backward and an optim_step submitted back to back, a sampler,
//! a sample, a saved state and a model created from it, each against its own `rlx serve`, whose
//! request records are compared endpoint by endpoint (ids and names normalised; everything else
//! exact, including the decoded protobuf bodies).

use std::collections::BTreeMap;

use rlx::backend::{Policy, tinker};
use rlx::seam::{AdamParams, Datum, LossFn, LossFnInputs, SampleRequest, SamplingParams, Stop};
use serde_json::Value;

use crate::common::{TestContext, repo};
use crate::tinker_sdk::{Server, sdk_python};

/// Ids and names differ between two sessions; everything else must not.
fn normalise(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, v)| {
                    let v = match k.as_str() {
                        "session_id" | "model_id" | "sampling_session_id" | "request_id" => Value::String(format!("<{k}>")),
                        // The SDK sends `{}`; rlx names the run and spec (the server stores it).
                        "user_metadata" => Value::String("<user_metadata>".into()),
                        "path" if v.as_str().is_some_and(|p| p.starts_with("tinker://")) => Value::String("<tinker path>".into()),
                        _ => normalise(v),
                    };
                    (k.clone(), v)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(normalise).collect()),
        other => other.clone(),
    }
}

/// The first request to each endpoint that did work (not turned away, not a resubmission).
fn first_per_endpoint(record: &[Value]) -> BTreeMap<String, Value> {
    let mut out = BTreeMap::new();
    for r in record {
        let path = r["path"].as_str().unwrap_or_default().to_string();
        out.entry(path).or_insert_with(|| r.clone());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rlx_sends_what_the_sdk_sends_for_the_same_operations() {
    let Some(python) = sdk_python() else { return };
    let cx = TestContext::new();
    let model = cx.path().join("tiny");
    crate::engine::tiny_model(&model);

    // The SDK.
    let sdk_cx = TestContext::new();
    let sdk_server = Server::start(&sdk_cx, &model, &[]);
    let script = repo().join("tests/fixtures/tinker_sdk/same_ops.py");
    let out = sdk_server.python(&python, &script).arg("tiny-model").current_dir(sdk_cx.path()).output().unwrap();
    assert!(out.status.success(), "{}\n{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));

    // rlx's client, the same operations in the same order.
    let server = Server::start(&cx, &model, &[]);
    let options = tinker::Options { base_model: "tiny-model".into(), ..crate::tinker::options(&server.url, &model) };
    let Policy::Trainable(trainer) = tinker::open(options).await.unwrap() else { panic!("trainable") };
    let datum = Datum {
        model_input: vec![5, 6, 7, 8],
        loss_fn_inputs: LossFnInputs { target_tokens: vec![6, 7, 8, 9], weights: None, logprobs: Some(vec![0.0, 0.0, -0.5, -0.25]), advantages: Some(vec![0.0, 0.0, 1.0, 1.0]) },
    };
    let fb = trainer.forward_backward(vec![datum], LossFn::ImportanceSampling);
    let opt = trainer.optim_step(AdamParams { learning_rate: 1e-3, ..AdamParams::default() });
    fb.await.unwrap();
    opt.await.unwrap();
    let sampler = trainer.sampler().await.unwrap();
    let params = SamplingParams { max_tokens: 4, temperature: 1.0, top_p: 1.0, top_k: None, stop: vec![Stop::Token(1)], seed: None };
    sampler.sample(vec![SampleRequest { prompt: vec![5, 6, 7], num_samples: 2, seed: Some(5), greedy: false }], &params).await.unwrap();
    let state = trainer.save_state("s1").await.unwrap();
    trainer.load_state(&state).await.unwrap();

    let theirs = first_per_endpoint(&sdk_server.record());
    let ours = first_per_endpoint(&server.record());
    let endpoints = [
        "/api/v1/client/config",
        "/api/v1/create_session",
        "/api/v1/create_model",
        "/api/v1/forward_backward",
        "/api/v1/optim_step",
        "/api/v1/save_weights_for_sampler",
        "/api/v1/asample",
        "/api/v1/save_weights",
        "/api/v1/load_weights",
        "/api/v1/retrieve_future",
    ];
    let mut differences = vec![];
    for e in endpoints {
        let (Some(t), Some(o)) = (theirs.get(e), ours.get(e)) else {
            differences.push(format!("{e}: SDK sent it: {}, rlx sent it: {}", theirs.contains_key(e), ours.contains_key(e)));
            continue;
        };
        for field in ["method", "body", "seq_id", "request_type"] {
            let (tv, ov) = (normalise(&t[field]), normalise(&o[field]));
            if tv != ov {
                differences.push(format!("{e} `{field}`:\n  SDK: {tv}\n  rlx: {ov}"));
            }
        }
        if t["idempotency_key"].is_string() != o["idempotency_key"].is_string() {
            differences.push(format!("{e}: idempotency key sent by the SDK: {}, by rlx: {}", t["idempotency_key"].is_string(), o["idempotency_key"].is_string()));
        }
    }
    assert!(differences.is_empty(), "requests differ:\n{}", differences.join("\n"));
}
