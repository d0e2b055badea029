//! `rlx eval RUN_DIR[@STEP]`: the plan that evaluates a run's checkpoint under the run's own
//! spec (its `spec.yaml` and recorded overrides, planned as `rlx run --resume` plans them), with `schedule.max_steps=0` and `backend.model_path` naming the
//! checkpoint, then the eval flags and the user's overrides. `RUN_DIR@base` leaves
//! `backend.model_path` out: the base model under the same protocol, the pair `rlx compare`
//! tests.
//!
//! The eval's own run directory records the checkpoint it measured: `backend.model_path` in its
//! `resolved.json` (and its run id, which hashes it).

use crate::cli::{exit, printer};
use crate::export::locate;
use crate::runlog::RunDir;
use crate::spec::overrides;

/// Whether the positional argument names a run or checkpoint directory rather than a spec file.
pub(super) fn is_checkpoint_arg(arg: &str) -> bool {
    locate::split(arg).0.is_dir()
}

/// Plans the evaluation of the checkpoint `arg` names; `extra` are the overrides the eval flags
/// make, `user` the user's. `Err(code)` after printing the problem.
pub(super) fn plan(arg: &str, extra: &[String], user: Vec<overrides::Override>) -> Result<Result<crate::plan::Plan, crate::plan::Error>, u8> {
    let (dir, selector) = locate::split(arg);
    let (run, model_path) = if selector == Some("base") {
        match RunDir::open(dir) {
            Ok(run) => (run, None),
            Err(e) => {
                printer::error_chain(&e, &["`@base` follows a run directory: `rlx eval runs/<id>@base`".into()]);
                return Err(exit::USAGE);
            }
        }
    } else {
        let ck = match locate::locate(arg) {
            Ok(ck) => ck,
            Err(e) => {
                printer::error_chain(&e, &e.hints());
                return Err(if e.is_user_error() { exit::USAGE } else { exit::INTERNAL });
            }
        };
        let Some(run) = ck.run.clone() else {
            printer::error_message(
                &format!("checkpoint `{}` is not inside a run directory, so there is no spec to evaluate it with", ck.state.display()),
                &[format!("name a spec: `rlx eval SPEC backend.model_path={}`", ck.state.display())],
            );
            return Err(exit::USAGE);
        };
        if ck.is_remote() {
            printer::error_message(&format!("checkpoint `{}` is on a remote service", ck.state.display()), &["evaluate Tinker sampler weights with `rlx eval SPEC backend.model_path=tinker://…`".into()]);
            return Err(exit::USAGE);
        }
        let step = ck.step.map(|s| format!(" (step {s})")).unwrap_or_default();
        printer::status(format!("evaluating checkpoint {}{step} of `{}`", ck.name, run.path().display()));
        (run, Some(ck.state))
    };
    let recorded = match super::common::RecordedSpec::of(&run) {
        Ok(r) => r,
        Err(e) => {
            printer::error_chain(e.as_ref(), &[format!("`{}` is not a run that can be evaluated again", run.path().display())]);
            return Err(exit::USAGE);
        }
    };
    let mut ovs = recorded.overrides;
    let mut texts: Vec<String> = extra.to_vec();
    if let Some(p) = &model_path {
        texts.push(format!("backend.model_path={}", serde_json::to_string(&p.display().to_string()).expect("strings serialise")));
    }
    for t in &texts {
        match overrides::parse(t) {
            Ok(o) => ovs.push(o),
            Err(d) => {
                printer::diagnostics(&d, "invalid arguments");
                return Err(exit::USAGE);
            }
        }
    }
    ovs.extend(user);
    Ok(super::common::plan_text(&recorded.path, recorded.text, &ovs))
}
