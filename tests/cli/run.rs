//! `rlx run`: validation and planning happen before anything else; bad specs never start a run.

use crate::common::TestContext;

#[test]
fn run_validates_first_and_names_the_run() {
    let cx = TestContext::new();
    let r = cx.run(&["run", "spec.yaml", "lr=3e-5"]);
    // The engine is the next piece of work: the command stops with a clear error after planning.
    assert_eq!(r.code, 3, "{}", r.stderr);
    assert!(r.stderr.contains("run mini-"), "{}", r.stderr);
    assert!(r.stderr.contains("not implemented yet"), "{}", r.stderr);
    assert!(!cx.path().join("runs").exists(), "no run directory for a run that cannot start");

    let r = cx.run(&["run", "spec.yaml", "optimizer.learning_rte=3e-5"]);
    assert_eq!(r.code, 2);
    assert!(r.stderr.contains("did you mean `learning_rate`?"));
    let r = cx.run(&["run", "spec.yaml", "spec.yaml"]);
    assert_eq!(r.code, 2);
}
