//! Which checkpoint a command-line argument names: `RUN_DIR` (its last checkpoint),
//! `RUN_DIR@STEP` (`@11`, `@step-000011`, `@last`, `@best`: the checkpoint whose evaluation scored
//! highest), or a checkpoint directory itself
//! (`runs/<id>/checkpoints/step-000011`, or any directory holding a trainer's `state.json`).
//!
//! `rlx export` and `rlx eval` share it, so the two commands read an argument the same way.

use std::path::{Path, PathBuf};

use super::error::Error;
use crate::runlog::metrics::eval;
use crate::runlog::{CheckpointRecord, RunDir, files};

/// A located checkpoint.
#[derive(Debug, Clone)]
pub(crate) struct Checkpoint {
    /// The state: an absolute local directory, or a remote URI (`tinker://…`) kept as written.
    pub(crate) state: PathBuf,
    /// `step-000011`.
    pub(crate) name: String,
    /// The last training step the state includes, when known.
    pub(crate) step: Option<u32>,
    /// The run it belongs to, when it is inside one.
    pub(crate) run: Option<RunDir>,
}

impl Checkpoint {
    /// Whether the state lives on a remote service.
    pub(crate) fn is_remote(&self) -> bool {
        self.state.to_string_lossy().contains("://")
    }
}

/// Finds the checkpoint `arg` names.
///
/// # Errors
/// [`Error::NotACheckpoint`] for a path that is neither kind of directory,
/// [`Error::NoCheckpoints`] for a run without one, [`Error::NoStep`] for a missing step.
pub(crate) fn locate(arg: &str) -> Result<Checkpoint, Error> {
    let (path, selector) = split(arg);
    let path = std::path::absolute(path).map_err(|source| Error::Io { action: "resolve", path: path.to_path_buf(), source })?;
    if path.join(files::STATUS).is_file() {
        return in_run(&path, selector);
    }
    if selector.is_none() && path.join("state.json").is_file() {
        return Ok(bare(&path));
    }
    Err(Error::NotACheckpoint { path })
}

/// `RUN_DIR@STEP` → (`RUN_DIR`, `Some("STEP")`), when the text after the last `@` is a step and
/// the whole argument is not itself an existing path.
pub(crate) fn split(arg: &str) -> (&Path, Option<&str>) {
    if !Path::new(arg).exists()
        && let Some((dir, sel)) = arg.rsplit_once('@')
        && !sel.is_empty()
        && !sel.contains('/')
    {
        return (Path::new(dir), Some(sel));
    }
    (Path::new(arg), None)
}

/// Which checkpoint of a run a selector asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    /// The last one (`@last`, or no selector).
    Last,
    /// The one at a step (`@11`, `@step-000011`).
    Step(u32),
    /// The one whose evaluation scored highest (`@best`).
    Best,
}

fn parse_selector(sel: &str) -> Option<Want> {
    match sel {
        "last" => Some(Want::Last),
        "best" => Some(Want::Best),
        _ => sel.strip_prefix("step-").unwrap_or(sel).parse().ok().map(Want::Step),
    }
}

/// The checkpointed step whose evaluation scored highest on the run's smallest pass@k (pass@1
/// when it has it); the earliest of equals. The eval at step `s` measured the weights the
/// checkpoint of step `s` holds.
fn best_step(run: &RunDir, steps: &[u32]) -> Result<Option<(u32, String, f64)>, Error> {
    let lines = run.metrics()?.rows;
    let k = lines.iter().flat_map(|l| l.values.keys().filter_map(|n| eval::parse_pass_at(n))).min();
    let Some(k) = k else { return Ok(None) };
    let name = eval::pass_at(k);
    let mut best: Option<(u32, f64)> = None;
    for l in &lines {
        let (Ok(step), Some(v)) = (u32::try_from(l.step), l.get(&name)) else { continue };
        if steps.contains(&step) && v.is_finite() && best.is_none_or(|(_, b)| v > b) {
            best = Some((step, v));
        }
    }
    Ok(best.map(|(s, v)| (s, name, v)))
}

fn in_run(path: &Path, selector: Option<&str>) -> Result<Checkpoint, Error> {
    let run = RunDir::open(path)?;
    let records = run.checkpoints()?.rows;
    // Keep the last record of each step whose state still exists (a resumed run may have
    // written a step twice; a deleted checkpoint directory cannot be exported).
    let mut usable: Vec<(CheckpointRecord, PathBuf)> = vec![];
    for rec in &records {
        let Some(state) = &rec.state_path else { continue };
        let abs = if state.contains("://") { PathBuf::from(state) } else { path.join(state) };
        if !state.contains("://") && !abs.join("state.json").is_file() {
            continue;
        }
        usable.retain(|(r, _)| r.step != rec.step);
        usable.push((rec.clone(), abs));
    }
    let want = match selector {
        None => Want::Last,
        Some(sel) => parse_selector(sel).ok_or_else(|| Error::Usage(format!("`@{sel}` is not a step: write `@11`, `@step-000011`, `@last` or `@best`")))?,
    };
    let found = match want {
        Want::Last => usable.last(),
        Want::Step(step) => usable.iter().rev().find(|(r, _)| r.step == step),
        Want::Best => {
            let steps: Vec<u32> = usable.iter().map(|(r, _)| r.step).collect();
            match best_step(&run, &steps)? {
                Some((step, metric, value)) => {
                    tracing::info!(step, metric, value, "`@best`: the checkpoint whose evaluation scored highest");
                    usable.iter().rev().find(|(r, _)| r.step == step)
                }
                None if usable.is_empty() => None,
                None => return Err(Error::NoBest { run: path.to_path_buf(), checkpoints: steps }),
            }
        }
    };
    match found {
        Some((rec, state)) => Ok(Checkpoint { state: state.clone(), name: rec.name.clone(), step: Some(rec.step), run: Some(run) }),
        None if usable.is_empty() => {
            let detail = if records.is_empty() {
                format!("`{}` records none", files::CHECKPOINTS)
            } else {
                format!("`{}` records {} but their directories are gone", files::CHECKPOINTS, records.len())
            };
            Err(Error::NoCheckpoints { run: path.to_path_buf(), detail })
        }
        None => Err(Error::NoStep { run: path.to_path_buf(), step: selector.unwrap_or_default().to_string(), available: usable.iter().map(|(r, _)| r.step).collect() }),
    }
}

/// A checkpoint directory given directly: its run is two levels up when that is a run
/// directory (`runs/<id>/checkpoints/step-000011`).
fn bare(path: &Path) -> Checkpoint {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let run = path.parent().and_then(Path::parent).filter(|r| r.join(files::STATUS).is_file()).and_then(|r| RunDir::open(r).ok());
    let recorded = run.as_ref().and_then(|r| r.checkpoints().ok()).and_then(|c| c.rows.into_iter().rev().find(|rec| rec.name == name)).map(|rec| rec.step);
    let step = recorded.or_else(|| name.strip_prefix("step-").and_then(|s| s.parse().ok()));
    Checkpoint { state: path.to_path_buf(), name, step, run }
}

/// The checkpoint `arg` names: a `tinker://` path as it is, else what [`locate`] finds
/// (a run directory whose checkpoints are on Tinker gives their `tinker://` paths).
///
/// # Errors
/// As [`locate`]; a `tinker://` string that is not a checkpoint path.
pub(crate) fn locate_any(arg: &str) -> Result<Checkpoint, Error> {
    if arg.starts_with("tinker://") {
        let p = crate::tinker::TinkerPath::parse(arg).map_err(|e| Error::Usage(e.to_string()))?;
        return Ok(Checkpoint { state: PathBuf::from(arg), name: p.name, step: None, run: None });
    }
    locate(arg)
}

/// Finds the checkpoint a teacher reference names for the plan (`grpo.distill.teacher.base:
/// runs/<id>@STEP`), as `rlx export` reads the same argument: the plan cannot read run
/// directories itself (`runlog` is a layer above it), so the command line passes this in.
pub(crate) struct RunCheckpoints;

impl crate::plan::Checkpoints for RunCheckpoints {
    fn find(&self, reference: &str) -> Result<Option<crate::plan::FoundCheckpoint>, crate::plan::NotFound> {
        let (dir, selector) = split(reference);
        let named = dir.join(files::STATUS).is_file() || (selector.is_none() && dir.join("state.json").is_file());
        if !named {
            return Ok(None);
        }
        let not_found = |e: &Error| crate::plan::NotFound { message: crate::causes::causes(e).join(": "), hints: e.hints() };
        let ck = locate(reference).map_err(|e| not_found(&e))?;
        if ck.is_remote() {
            // A Tinker run's sampler weights when it recorded them, else its state (which the
            // plan refuses on the embedded trainer and a Tinker teacher samples).
            let records = ck.run.as_ref().and_then(|r| r.checkpoints().ok()).map(|c| c.rows).unwrap_or_default();
            let sampler = records.into_iter().rev().find(|r| r.name == ck.name).and_then(|r| r.sampler_path).filter(|p| p.starts_with("tinker://"));
            let sampler = sampler.unwrap_or_else(|| ck.state.display().to_string());
            return Ok(Some(crate::plan::FoundCheckpoint { state: ck.state, step: ck.step, base_model: PathBuf::new(), sampler: Some(sampler) }));
        }
        let header = crate::backend::local::state::read_header(&ck.state).map_err(|e| crate::plan::NotFound { message: crate::causes::causes(&e).join(": "), hints: vec![] })?;
        Ok(Some(crate::plan::FoundCheckpoint { state: ck.state, step: ck.step, base_model: header.base_model, sampler: None }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn selectors_split_off_only_when_the_path_does_not_exist() {
        assert_eq!(split("runs/x@11"), (Path::new("runs/x"), Some("11")));
        assert_eq!(split("runs/x@step-000011"), (Path::new("runs/x"), Some("step-000011")));
        assert_eq!(split("runs/x"), (Path::new("runs/x"), None));
        assert_eq!(split("a@b/c"), (Path::new("a@b/c"), None));
        let dir = tempfile::tempdir().unwrap();
        let odd = dir.path().join("run@3");
        std::fs::create_dir(&odd).unwrap();
        assert_eq!(split(odd.to_str().unwrap()), (odd.as_path(), None));
    }

    #[test]
    fn steps_parse() {
        assert_eq!(parse_selector("11"), Some(Want::Step(11)));
        assert_eq!(parse_selector("step-000011"), Some(Want::Step(11)));
        assert_eq!(parse_selector("last"), Some(Want::Last));
        assert_eq!(parse_selector("best"), Some(Want::Best));
        assert_eq!(parse_selector("worst"), None);
    }
}
