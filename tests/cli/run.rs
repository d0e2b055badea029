//! `rlx run`: validation and planning happen before anything else; bad specs never start a run.

use crate::common::TestContext;

#[test]
fn run_validates_first_and_names_the_run() {
    let cx = TestContext::new();
    // A model that is neither a path nor in the Hugging Face cache: the run fails at set-up,
    // says why, and records the failure in its run directory.
    let r = cx.rlx().args(["run", "spec.yaml", "lr=3e-5"]).env("HF_HUB_CACHE", cx.path().join("empty-hf")).env("HF_HUB_OFFLINE", "1").output().unwrap();
    let r = crate::common::Run::from(r);
    // A missing model is the user's to fix: exit 2, with the cause printed.
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("Caused by:") && r.stderr.contains("not found in the Hugging Face cache"), "{}", r.stderr);
    let runs: Vec<_> = std::fs::read_dir(cx.path().join("runs")).unwrap().flatten().collect();
    let status: serde_json::Value = serde_json::from_slice(&std::fs::read(runs[0].path().join("status.json")).unwrap()).unwrap();
    assert_eq!(status["state"], "failed");
    assert!(status["reason"].as_str().unwrap().contains("huggingface-cli download org/model"));

    let r = cx.run(&["run", "spec.yaml", "optimizer.learning_rte=3e-5"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("did you mean `learning_rate`?"));
    let r = cx.run(&["run", "spec.yaml", "spec.yaml"]);
    assert_eq!(r.code, 2);
}

/// A backend that cannot start (here: Tinker without an API key) stops the run at once, before
/// data, prompts or the model are touched (the model here is an uncached Hub id), as the user's
/// error, with what to do.
#[test]
fn a_backend_that_cannot_start_exits_2_before_loading_anything() {
    let cx = TestContext::new();
    let r = crate::common::Run::from(
        cx.rlx()
            .args(["run", "spec.yaml", "backend={kind: tinker}"])
            .env_remove("TINKER_API_KEY")
            .env("HF_HUB_CACHE", cx.path().join("empty-hf"))
            .env("HF_HUB_OFFLINE", "1")
            .output()
            .unwrap(),
    );
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(r.stderr.contains("no Tinker API key: set `TINKER_API_KEY`"), "{}", r.stderr);
    assert!(!r.stderr.contains("Hugging Face cache"), "the model was looked up first:\n{}", r.stderr);
}
