//! `resolved.json`: the plan's values in the shape of the spec (the same section and key names,
//! so `rlx compare` and the trackers show `optimizer.learning_rate`, not an internal name), with
//! every default the plan applied filled in, and `schema_version`.
//!
//! Version 1 (rlx before the plan module) held the spec after overrides, with `null` where the
//! plan later applies a default. [`upgrade`] reads either version into the current one by
//! resolving a version-1 spec the way [`super::plan`] does, so that two runs of the same
//! configuration compare equal whichever rlx wrote them.

use serde_json::{Value, json};

use super::types::{Plan, Written};
use crate::backend::BackendChoice;
use crate::backend::local::SampleWeights;
use crate::spec::Spec;

/// The file's name in a run directory.
pub const FILE: &str = "resolved.json";

/// The version [`to_json`] writes.
pub const SCHEMA_VERSION: u64 = 3;

/// `resolved.json` of `plan`: [`resolved_spec`] with `schema_version`.
pub fn to_json(plan: &Plan) -> Value {
    let mut v = serde_json::to_value(resolved_spec(plan)).unwrap_or_else(|_| json!({}));
    if let Some(obj) = v.as_object_mut() {
        obj.insert("schema_version".into(), json!(SCHEMA_VERSION));
    }
    v
}

/// The spec the run was made with, every default the plan applied written in, in the spec's
/// own types: `resolved.json` always reads back as a spec, and resolving it again gives the
/// same plan. (Rejected: patching the serialized spec key by key, which could write a key
/// the schema does not have and nothing would notice.)
pub fn resolved_spec(plan: &Plan) -> Spec {
    use crate::spec::types::{Backend, LossAgg};
    let mut spec = plan.written.spec.clone();
    spec.eval.samples = Some(plan.eval.samples);
    spec.eval.max_tokens = Some(count(plan.eval.sampling.max_tokens));
    spec.eval.greedy = Some(plan.eval.greedy);
    if let LossAgg::Constant { tokens } = &mut spec.grpo.loss_agg {
        // C defaults to `sampling.max_tokens`: the value the run divided by.
        *tokens = Some(plan.grpo.agg_constant);
    }
    spec.sandbox.concurrency = plan.sandbox.concurrency;
    // The trackers' names (not their servers or directories: a URL may carry credentials, a
    // directory is this machine's), so that `rlx sync` finds the same W&B run and experiment.
    if let (Some(w), Some(p)) = (&mut spec.log.sinks.wandb, &plan.log.trackers.wandb) {
        (w.project, w.name) = (Some(p.project.clone()), Some(p.name.clone()));
    }
    if let (Some(m), Some(p)) = (&mut spec.log.sinks.mlflow, &plan.log.trackers.mlflow) {
        m.experiment = Some(p.experiment.clone());
    }
    if let Some(py) = &plan.python_reward {
        spec.reward.function = Some(py.function.clone());
        spec.reward.call_timeout_s = Some(py.call_timeout.as_secs_f64());
        spec.reward.max_failures = Some(py.max_failures);
    }
    spec.diagnostics = plan.diagnostics.clone();
    match (&mut spec.backend, &plan.backend) {
        (
            Backend::Local { max_tokens_per_microbatch, sample_weights, .. },
            BackendChoice::Local { max_tokens_per_microbatch: m, sample_weights: w, .. },
        ) => {
            *max_tokens_per_microbatch = Some(count(*m));
            *sample_weights = Some(match w {
                SampleWeights::F32 => crate::spec::types::SampleWeights::F32,
                SampleWeights::Q8_0 => crate::spec::types::SampleWeights::Q8_0,
                SampleWeights::Gguf => crate::spec::types::SampleWeights::Gguf,
            });
            // The f32's shortest decimal (0.7, not 0.699999988...): what the user wrote or the
            // sampling temperature it came from.
            spec.grpo.learner_temperature = plan.grpo.learner_temperature.to_string().parse().ok();
        }
        // `server` is the spec's own (or asked at first contact): nothing to fill in.
        (Backend::Tinker { max_in_flight, .. }, BackendChoice::Tinker { max_in_flight: m, .. }) => *max_in_flight = Some(count(*m)),
        (Backend::Openai { served_model, concurrency, timeout_s, max_retries, .. }, BackendChoice::Openai { served_model: m, concurrency: c, timeout, max_retries: r, .. }) => {
            *served_model = Some(m.clone());
            *concurrency = Some(count(*c));
            *timeout_s = Some(timeout.as_secs_f64());
            *max_retries = Some(*r);
        }
        // The plan's backend is the spec's, resolved: they never differ in kind.
        _ => {}
    }
    spec
}

/// `plan` as its run directory's `resolved.json` recorded it, when the directory exists: a
/// reopened run (`rlx run` again, `--resume`, a re-launched sweep, whichever entry point) goes
/// on as it started. The plan decides it, as it decides every other value; the engine reads
/// the plan only. (Rejected: the engine patching the plan after opening the run directory,
/// the one value that flowed back up.)
pub fn reopened(plan: Plan) -> Plan {
    let Some(recorded) = std::fs::read(plan.run_dir().join(FILE)).ok().and_then(|b| serde_json::from_slice(&b).ok()) else { return plan };
    match keep_recorded(&plan, recorded) {
        Some(kept) => {
            tracing::info!(run = %plan.run_id, "reopened with the settings its resolved.json recorded where today's defaults differ (grpo.learner_temperature)");
            kept
        }
        None => plan,
    }
}

/// `plan` with the settings its run recorded (`resolved`, any version) where the spec leaves
/// them to a default that has changed since: a resumed run goes on as it started. `None` when
/// nothing differs. Today that is the embedded trainer's learner temperature (version 2 and
/// earlier scored at 1; the default is now the sampling temperature).
pub fn keep_recorded(plan: &Plan, resolved: Value) -> Option<Plan> {
    if plan.written.spec.grpo.learner_temperature.is_some() || !matches!(plan.backend, BackendChoice::Local { .. }) {
        return None;
    }
    let recorded = upgrade(resolved).ok()?.pointer("/grpo/learner_temperature")?.as_f64()? as f32;
    if recorded == plan.grpo.learner_temperature {
        return None;
    }
    let mut kept = plan.clone();
    kept.grpo.learner_temperature = recorded;
    Some(kept)
}

/// A count the plan holds as `usize` and the spec as `u32` (it came from the spec's `u32`).
fn count(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

/// Why a `resolved.json` cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A version this rlx does not know (written by a newer one).
    #[error("`resolved.json` has schema_version {0}; this rlx reads versions 1 to {SCHEMA_VERSION}")]
    Newer(u64),
    /// A version-1 file that is not a spec this rlx can read.
    #[error("`resolved.json` (version 1) is not a spec this rlx can read")]
    NotASpec(#[source] serde_json::Error),
    /// A version-1 spec whose model names no source.
    #[error("`resolved.json` (version 1): {0}")]
    Model(#[from] crate::seam::SourceError),
}

/// Version 2 → 3: the embedded trainer scored at temperature 1 before `grpo.learner_temperature`
/// (whose default is now the sampling temperature); a resumed run keeps scoring as it did.
fn scored_at_one(mut v: Value) -> Value {
    let local = v.pointer("/backend/kind").and_then(Value::as_str) == Some("local");
    if let Some(obj) = v.as_object_mut() {
        obj.insert("schema_version".into(), json!(SCHEMA_VERSION));
        if local {
            let grpo = obj.entry("grpo").or_insert_with(|| json!({}));
            if grpo.get("learner_temperature").is_none() {
                grpo["learner_temperature"] = json!(1.0);
            }
        }
    }
    v
}

/// Reads a `resolved.json` of any known version as the current version.
///
/// # Errors
/// A newer version, or a version-1 file that is not a spec.
pub fn upgrade(v: Value) -> Result<Value, Error> {
    match v.get("schema_version").and_then(Value::as_u64) {
        Some(SCHEMA_VERSION) => Ok(v),
        Some(n) if n > SCHEMA_VERSION => Err(Error::Newer(n)),
        Some(2) => Ok(scored_at_one(v)),
        _ => {
            let mut spec: Spec = serde_json::from_value(v).map_err(Error::NotASpec)?;
            // Defaults that changed since: what the run was made with, not today's default.
            if let crate::spec::types::Backend::Local { sample_weights: sw @ None, .. } = &mut spec.backend {
                *sw = Some(crate::spec::types::SampleWeights::Q8_0);
            }
            if matches!(spec.backend, crate::spec::types::Backend::Local { .. }) {
                spec.grpo.learner_temperature.get_or_insert(1.0);
            }
            let written = Written { spec, path: Default::default(), text: String::new(), overrides: vec![], templates: vec![] };
            Ok(to_json(&super::resolve::resolve(written, String::new())?))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v1() -> Value {
        let spec: Spec = serde_json::from_value(json!({
            "name": "t", "model": {"base": "/m"}, "backend": {"kind": "local"},
            "data": {"train": [{"path": "/d.jsonl", "format": "mbpp"}]}, "prompt": {"user": "/u.j2"},
            "eval": {"k": [1, 4]}
        }))
        .unwrap();
        serde_json::to_value(spec).unwrap()
    }

    #[test]
    fn version_1_gets_the_defaults_the_plan_applies() {
        let old = v1();
        assert!(old.get("schema_version").is_none());
        assert!(old["eval"].get("samples").is_none_or(Value::is_null));
        let new = upgrade(old).unwrap();
        assert_eq!(new["schema_version"], json!(SCHEMA_VERSION));
        assert_eq!(new["grpo"]["learner_temperature"], json!(1.0), "rlx before the key scored at 1");
        assert_eq!(new["eval"]["samples"], json!(4));
        assert_eq!(new["backend"]["max_tokens_per_microbatch"], json!(crate::spec::defaults::MAX_TOKENS_PER_MICROBATCH));
        assert_eq!(new["backend"]["sample_weights"], json!("q8_0"));
        // Reading the current version changes nothing.
        assert_eq!(upgrade(new.clone()).unwrap(), new);
    }

    #[test]
    fn version_2_of_a_local_run_scored_at_one() {
        let mut v2 = upgrade(v1()).unwrap();
        v2["schema_version"] = json!(2);
        v2["grpo"].as_object_mut().unwrap().remove("learner_temperature");
        let new = upgrade(v2).unwrap();
        assert_eq!((new["schema_version"].clone(), new["grpo"]["learner_temperature"].clone()), (json!(SCHEMA_VERSION), json!(1.0)));
    }

    #[test]
    fn resolved_json_reads_back_as_a_spec_that_resolves_to_itself() {
        for backend in [json!({"kind": "local"}), json!({"kind": "tinker"}), json!({"kind": "openai", "base_url": "http://h/v1"})] {
            let mut spec = v1();
            spec["backend"] = backend;
            spec["grpo"] = json!({"loss_agg": {"kind": "constant"}});
            let once = upgrade(spec).unwrap();
            let mut again = once.clone();
            again.as_object_mut().unwrap().remove("schema_version");
            let spec: Spec = serde_json::from_value(again).expect("resolved.json is a spec");
            let written = Written { spec, path: Default::default(), text: String::new(), overrides: vec![], templates: vec![] };
            let twice = to_json(&super::super::resolve::resolve(written, String::new()).unwrap());
            assert_eq!(twice, once);
            assert!(once.pointer("/eval/samples").is_some() && once.pointer("/grpo/loss_agg/tokens").is_some(), "{once}");
        }
    }

    #[test]
    fn a_reopened_run_keeps_the_learner_temperature_it_recorded() {
        let plan_of = |extra: Value| {
            let mut v = v1();
            v["sampling"] = json!({"temperature": 0.7});
            if let Some(t) = extra.as_f64() {
                v["grpo"] = json!({"learner_temperature": t});
            }
            let spec: Spec = serde_json::from_value(v).unwrap();
            super::super::resolve::resolve(Written { spec, path: Default::default(), text: String::new(), overrides: vec![], templates: vec![] }, String::new()).unwrap()
        };
        let temperature = |p: &Plan| p.grpo.learner_temperature;
        let today = plan_of(Value::Null);
        assert!((temperature(&today) - 0.7).abs() < 1e-6, "the default is the sampling temperature");
        assert_eq!(to_json(&today)["grpo"]["learner_temperature"], json!(0.7), "written as 0.7, not as the f32's f64 value");
        // Written by an rlx before the option (version 2): it scored at 1, and goes on so.
        let mut v2 = to_json(&today);
        v2["schema_version"] = json!(2);
        v2["grpo"].as_object_mut().unwrap().remove("learner_temperature");
        let kept = keep_recorded(&today, v2).expect("a resumed version-2 run keeps scoring at 1");
        assert_eq!(temperature(&kept), 1.0);
        // Its own record, or a spec that names a temperature: nothing to keep.
        assert!(keep_recorded(&today, to_json(&today)).is_none());
        let named = plan_of(json!(0.9));
        let mut old = to_json(&named);
        old["grpo"]["learner_temperature"] = json!(1.0);
        assert!(keep_recorded(&named, old).is_none(), "the spec's own value wins");
    }

    #[test]
    fn newer_and_foreign_files_are_refused() {
        assert!(matches!(upgrade(json!({"schema_version": SCHEMA_VERSION + 1})), Err(Error::Newer(n)) if n == SCHEMA_VERSION + 1));
        assert!(matches!(upgrade(json!({"name": 5})), Err(Error::NotASpec(_))));
    }
}
