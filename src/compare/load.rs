//! Loading what `compare` reads: run directories and sweep directories, through `runlog`'s typed
//! readers, into [`Run`]s.
//!
//! Tolerant by design: a run that is still running, failed or was interrupted is loaded and
//! marked by its state; a torn last line (a crash mid-write, or a live run) is skipped by the
//! readers and noted; a missing `resolved.json`, `provenance.json` or `eval_results.jsonl` leaves
//! the part of the report that needs it empty, with a note. What is never tolerated: a run from
//! a newer rlx ([`crate::runlog::Error::NewerFormat`]: its fields may mean something else) and a
//! corrupt line in the middle of a file (dropping it would falsify the run's history).
//!
//! Why not polars: the data are tiny (runs × steps × keys), metric keys are sparse (eval keys
//! every few steps, keys added after a resume), lines can be torn, and polars is optional
//! (`parquet` feature) while `compare` must always build. `runlog::read_jsonl` already handles
//! all of that; a frame would add a conversion and nothing else.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::Error;
use crate::runlog::sweep::{RECORD, SweepDir};
use crate::runlog::{CheckpointRecord, EvalSampleRecord, EventRecord, MetricsLine, Provenance, RunDir, Split, State, Status, files};

/// One problem of one evaluation: pass@k's `n` and `c`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PassCounts {
    /// Samples graded (infrastructure failures left out).
    pub n: u32,
    /// Samples that passed every test.
    pub correct: u32,
}

/// A loaded run directory.
#[derive(Debug, Clone)]
pub(crate) struct Run {
    /// The run id (from `status.json`).
    pub id: String,
    /// Its directory, as given or found.
    pub path: PathBuf,
    /// `status.json`.
    pub status: Status,
    /// `resolved.json` flattened to `key.path → value` ([`super::configdiff::flatten`]); empty
    /// when absent.
    pub config: BTreeMap<String, String>,
    /// `metrics.jsonl`, in file order.
    pub metrics: Vec<MetricsLine>,
    /// `eval_results.jsonl`, main protocol: step → problem id → outcome.
    pub evals: BTreeMap<i64, BTreeMap<String, PassCounts>>,
    /// `eval_results.jsonl`, the greedy protocol's records (`eval.greedy`): step → problem id →
    /// outcome (one sample each). See [`Run::greedy`].
    pub greedy_evals: BTreeMap<i64, BTreeMap<String, PassCounts>>,
    /// Each eval problem's category (`eval_results.jsonl`'s `category`), where its data named one.
    pub categories: BTreeMap<String, String>,
    /// `checkpoints.jsonl`.
    pub checkpoints: Vec<CheckpointRecord>,
    /// Fingerprint of the eval problems (provenance), when recorded.
    pub eval_fingerprint: Option<String>,
    /// SHA-256 of the files the config names, by config key (`data.train.0.path`,
    /// `prompt.user`), from provenance: two runs naming the same bytes at different paths did
    /// not differ there.
    pub hashes: BTreeMap<String, String>,
    /// The diagnostics that fired (`events.jsonl`), in order.
    pub diagnostics: Vec<Fired>,
    /// `eval_rollouts.jsonl`: (step, problem id) → the completions recorded, by sample.
    pub eval_samples: BTreeMap<(i64, String), Vec<EvalSampleRecord>>,
    /// Things the reader noticed (torn lines, missing files), for the report's warnings.
    pub notes: Vec<String>,
}

impl Run {
    /// Whether the run completed every step.
    pub(crate) fn finished(&self) -> bool {
        self.status.state == State::Finished
    }

    /// `finished`, `running`, `failed` or `interrupted`.
    pub(crate) fn state(&self) -> &'static str {
        match self.status.state {
            State::Running => "running",
            State::Finished => "finished",
            State::Failed => "failed",
            State::Interrupted => "interrupted",
        }
    }

    /// The spec's `seed`, as text; `None` without a resolved spec.
    pub(crate) fn seed(&self) -> Option<&str> {
        self.config.get("seed").map(String::as_str)
    }

    /// Greedy pass@1's per-problem outcomes: the greedy protocol's records, or the main eval's
    /// when that is greedy (`eval.temperature: 0`, one sample each); empty when the run has none.
    pub(crate) fn greedy(&self) -> &BTreeMap<i64, BTreeMap<String, PassCounts>> {
        static NONE: BTreeMap<i64, BTreeMap<String, PassCounts>> = BTreeMap::new();
        if !self.greedy_evals.is_empty() {
            return &self.greedy_evals;
        }
        let greedy_main = self.config.get("eval.temperature").and_then(|t| t.parse::<f64>().ok()) == Some(0.0);
        if greedy_main && self.evals.values().flat_map(BTreeMap::values).all(|o| o.n <= 1) { &self.evals } else { &NONE }
    }

    /// The outcomes of one protocol: the main eval's, or greedy's.
    pub(crate) fn outcomes(&self, greedy: bool) -> &BTreeMap<i64, BTreeMap<String, PassCounts>> {
        if greedy { self.greedy() } else { &self.evals }
    }
}

/// A diagnostic signal that fired during a run (an `events.jsonl` `diagnostic` event).
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub(crate) struct Fired {
    /// The signal.
    pub signal: String,
    /// The step it fired at (−1: the baseline eval).
    pub step: i64,
    /// What was seen.
    pub evidence: String,
    /// What to do.
    pub remedy: String,
    /// `warn` or `stop`.
    pub action: String,
    /// Where to look (problems, rollouts), when the signal names some.
    pub leads: Vec<String>,
}

/// The runs named by `paths`, in the order given, each once: a run directory is itself; a sweep
/// directory (`sweeps/<id>/`, with `sweep.json`) is its members; any other directory is every
/// run directory directly inside it (`rlx compare runs/`). Warnings (sweep members never
/// started, stray directories skipped) are appended to `warnings`.
///
/// # Errors
/// [`Error::NotFound`] for a path that does not exist; [`Error::NotARun`] for a directory with no
/// runs; [`Error::Read`] for a run or sweep that
/// cannot be read (a newer format included); [`Error::NoRuns`] when nothing was found.
pub(crate) fn collect(paths: &[PathBuf], warnings: &mut Vec<String>) -> Result<Vec<Run>, Error> {
    let mut dirs: Vec<PathBuf> = vec![];
    for p in paths {
        if p.join(files::STATUS).is_file() {
            dirs.push(p.clone());
        } else if p.join(RECORD).is_file() {
            let sweep = SweepDir::open(p).map_err(|source| Error::Read { path: p.clone(), source })?;
            let record = sweep.record().map_err(|source| Error::Read { path: p.clone(), source })?;
            for m in record.members {
                if m.dir.join(files::STATUS).is_file() {
                    dirs.push(m.dir);
                } else {
                    warnings.push(format!("sweep `{}`: member `{}` has no run directory yet (not started)", record.sweep_id, m.run_id));
                }
            }
        } else if p.is_dir() {
            let mut found: Vec<PathBuf> = std::fs::read_dir(p)
                .map_err(|e| Error::Read { path: p.clone(), source: crate::runlog::io("cannot list", p)(e) })?
                .flatten()
                .map(|e| e.path())
                .filter(|d| d.join(files::STATUS).is_file())
                .collect();
            if found.is_empty() {
                return Err(Error::NotARun { path: p.clone() });
            }
            found.sort();
            dirs.extend(found);
        } else if p.exists() {
            // `runs/*` can match a stray file (a note, a lock): not a run, and not worth
            // stopping for when the glob also found runs.
            warnings.push(format!("`{}` is not a directory: skipped", p.display()));
        } else {
            return Err(Error::NotFound { path: p.clone() });
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    let mut runs = vec![];
    for d in dirs {
        let key = std::fs::canonicalize(&d).unwrap_or_else(|_| d.clone());
        if seen.insert(key) {
            runs.push(load(&d)?);
        }
    }
    if runs.is_empty() {
        let given = paths.iter().map(|p| format!("`{}`", p.display())).collect::<Vec<_>>().join(", ");
        return Err(Error::NoRuns { given });
    }
    Ok(runs)
}

/// Loads one run directory.
///
/// # Errors
/// [`Error::Read`]: no `status.json`, a newer format, I/O errors, a corrupt line.
pub(crate) fn load(path: &Path) -> Result<Run, Error> {
    let err = |source| Error::Read { path: path.to_path_buf(), source };
    let dir = RunDir::open(path).map_err(err)?;
    let status = dir.status().map_err(err)?.expect("open checked status.json");
    let mut notes = vec![];
    let mut config = match dir.read_json::<serde_json::Value>(files::RESOLVED).map_err(err)? {
        // Read as the current version, so that runs written before the plan module (version 1:
        // defaults left `null`) compare equal to today's runs of the same configuration.
        Some(v) => match crate::plan::record::upgrade(v.clone()) {
            Ok(current) => super::configdiff::flatten(&current),
            Err(e) => {
                notes.push(format!("{}: {e}; compared as written", files::RESOLVED));
                super::configdiff::flatten(&v)
            }
        },
        None => {
            notes.push(format!("no {}: its config is unknown", files::RESOLVED));
            BTreeMap::new()
        }
    };
    let provenance = match dir.provenance() {
        Ok(p) => Some(p),
        Err(crate::runlog::Error::Missing { .. }) => None,
        Err(e) => return Err(err(e)),
    };
    if let Some(p) = &provenance {
        super::configdiff::add_switches(&mut config, &p.switches);
    }
    let eval_fingerprint = provenance.as_ref().and_then(|p| p.data.as_ref()).map(|d| d.eval.fingerprint.clone());
    let hashes = provenance.as_ref().map(file_hashes).unwrap_or_default();
    let events = dir.events().map_err(err)?;
    torn(&mut notes, files::EVENTS, events.torn_line);
    let diagnostics = events
        .rows
        .into_iter()
        .filter_map(|e| match e {
            EventRecord::Diagnostic { signal, step, evidence, remedy, action, leads, .. } => Some(Fired { signal, step, evidence, remedy, action, leads }),
            _ => None,
        })
        .collect();
    let samples = dir.eval_rollouts().map_err(err)?;
    torn(&mut notes, files::EVAL_ROLLOUTS, samples.torn_line);
    let mut eval_samples: BTreeMap<(i64, String), Vec<EvalSampleRecord>> = BTreeMap::new();
    // The regressions the HTML report shows are the main protocol's completions.
    for s in samples.rows.into_iter().filter(|s| s.protocol.is_none()) {
        eval_samples.entry((s.step, s.completion.problem_id.clone())).or_default().push(s);
    }
    let metrics = dir.metrics().map_err(err)?;
    torn(&mut notes, files::METRICS, metrics.torn_line);
    let results = dir.eval_results().map_err(err)?;
    torn(&mut notes, files::EVAL_RESULTS, results.torn_line);
    let mut evals: BTreeMap<i64, BTreeMap<String, PassCounts>> = BTreeMap::new();
    let mut greedy_evals: BTreeMap<i64, BTreeMap<String, PassCounts>> = BTreeMap::new();
    let mut categories = BTreeMap::new();
    for r in results.rows {
        if let Some(c) = r.category {
            categories.insert(r.problem_id.clone(), c);
        }
        // A resume drops what a crashed attempt wrote after its checkpoint, so a (step,
        // problem) pair appears once; if it ever did twice, the later record is the one that
        // stands, as it is for metrics.
        let into = if r.protocol.is_some() { &mut greedy_evals } else { &mut evals };
        into.entry(r.step).or_default().insert(r.problem_id, PassCounts { n: r.n, correct: r.correct });
    }
    if categories.is_empty() {
        categories = categories_from_data(&config, &hashes, &mut notes);
    }
    let checkpoints = dir.checkpoints().map_err(err)?;
    torn(&mut notes, files::CHECKPOINTS, checkpoints.torn_line);
    Ok(Run {
        id: status.run_id.clone(),
        path: path.to_path_buf(),
        status,
        config,
        metrics: metrics.rows,
        evals,
        greedy_evals,
        categories,
        checkpoints: checkpoints.rows,
        eval_fingerprint,
        hashes,
        diagnostics,
        eval_samples,
        notes,
    })
}

/// For a run whose eval records carry no category (written before records had one): the
/// categories of the eval data files its config names (`data.eval.N.path`), read now
/// ([`crate::health::categories::from_data`]), each file read noted.
fn categories_from_data(config: &BTreeMap<String, String>, hashes: &BTreeMap<String, String>, notes: &mut Vec<String>) -> BTreeMap<String, String> {
    use crate::health::categories::{DataFile, from_data};
    let files: Vec<DataFile> = config
        .iter()
        .filter(|(k, _)| k.starts_with("data.eval.") && k.ends_with(".path"))
        .map(|(k, path)| DataFile { path: path.into(), format: config.get(&k.replace(".path", ".format")).cloned(), sha256: hashes.get(k).cloned() })
        .collect();
    let (found, said) = from_data(&files);
    notes.extend(said);
    found
}

/// The config keys of the files provenance fingerprinted, with their SHA-256: the i-th train
/// (eval) dataset is `data.train.{i}.path` (`data.eval.{i}.path`), as the spec lists them; a
/// template is the key that names it (`prompt.user`). Remote datasets have no hash.
fn file_hashes(p: &Provenance) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    for (split, name) in [(Split::Train, "train"), (Split::Eval, "eval")] {
        for (i, d) in p.datasets.iter().filter(|d| d.split == split && d.stage.is_none()).enumerate() {
            if let Some(h) = &d.sha256 {
                out.insert(format!("data.{name}.{i}.path"), h.clone());
            }
        }
    }
    for d in &p.datasets {
        if let (Some(n), Some(h)) = (d.stage, &d.sha256) {
            // Runs older than `key` fingerprinted supervised stages only, whose key this is.
            let key = d.key.clone().unwrap_or_else(|| format!("stages.{n}.{}", if d.split == Split::Train { "train" } else { "eval" }));
            out.insert(key, h.clone());
        }
    }
    for t in &p.templates {
        out.insert(t.role.clone(), t.sha256.clone());
    }
    out
}

fn torn(notes: &mut Vec<String>, file: &str, line: Option<usize>) {
    if let Some(l) = line {
        notes.push(format!("{file}: torn last line {l} skipped (an interrupted write, or the run is live)"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stage_file_is_keyed_by_its_spec_key_and_data_keeps_its_own_indices() {
        let p: Provenance = serde_json::from_value(serde_json::json!({
            "schema_version": 1, "rlx_version": "0", "run_id": "r-1", "spec_hash": "1", "spec_path": "s.yaml", "spec_sha256": "0",
            "overrides": [], "argv": [], "git": null, "templates": [],
            "datasets": [
                {"split": "train", "path": "/sft.jsonl", "sha256": "s0", "bytes": 1, "stage": 0},
                {"split": "train", "path": "/train.jsonl", "sha256": "t0", "bytes": 1},
                {"split": "eval", "path": "/held.jsonl", "sha256": "h0", "bytes": 1, "stage": 0},
                {"split": "eval", "path": "/eval.jsonl", "sha256": "e0", "bytes": 1},
                {"split": "train", "path": "/own.jsonl", "sha256": "d0", "bytes": 1, "stage": 1, "key": "stages.1.train.0.path"},
            ],
            "model": {"base": "m", "revision": null, "tokenizer": "m", "chat_template": "chatml"},
            "host": {"hostname": "h", "os": "linux", "cores": 2}, "created_at": "2026-01-01T00:00:00Z",
        }))
        .unwrap();
        let h = file_hashes(&p);
        let pairs: Vec<(&str, &str)> = h.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
        assert_eq!(pairs, [("data.eval.0.path", "e0"), ("data.train.0.path", "t0"), ("stages.0.eval", "h0"), ("stages.0.train", "s0"), ("stages.1.train.0.path", "d0")]);
    }
}
