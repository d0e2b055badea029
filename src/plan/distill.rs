//! `grpo.distill` checked: a coefficient ≥ 0, a backend that can score a teacher, and a teacher
//! on this machine whose tokenizer is the student's.
//!
//! The tokenizers are compared here, at validate, rather than when the run starts: a teacher
//! with another vocabulary scores other tokens, and its log-probabilities would silently train
//! the student toward noise. Both are compared by their vocabulary (token → id, added tokens
//! included), not by the bytes of `tokenizer.json` (rejected: two exports of one tokenizer differ
//! in formatting and key order).
//!
//! Runs with the other semantic checks (`check::check` calls [`check`]) after `check_model`, so
//! the student's `model.base` is already absolute when it is a directory.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use crate::seam::ModelSource;
use crate::spec::diagnostic::Diagnostic;
use crate::spec::node::Node;
use crate::spec::types::{Backend, Spec};

/// The distillation key's rules; on success `grpo.distill.teacher.base` is absolute.
pub(crate) fn check(spec: &mut Spec, tree: &Node) -> Vec<Diagnostic> {
    let mut out = vec![];
    let err = |key: &str, message: String| {
        let segs: Vec<&str> = key.split('.').collect();
        Diagnostic::new(message, Some(tree.span_of(&segs))).at(key)
    };
    let backend = spec.backend.kind();
    let local = matches!(spec.backend, Backend::Local { .. });
    let student = student_tokenizer(spec);
    let Some(d) = spec.grpo.distill.as_mut() else { return out };
    if !(d.coef.is_finite() && d.coef >= 0.0) {
        out.push(err("grpo.distill.coef", format!("`grpo.distill.coef` must be ≥ 0, found {}", d.coef)));
    }
    if !local && spec.schedule.max_steps > 0 && !spec.schedule.dry_run {
        out.push(err("grpo.distill", format!("`grpo.distill` is not available on the `{backend}` backend")).hint("the teacher is scored by the embedded trainer: use `backend.kind: local`"));
    }
    let key = "grpo.distill.teacher.base";
    let written = d.teacher.base.clone();
    let Ok(ModelSource::Path(p)) = ModelSource::parse(&written, None) else {
        out.push(err(key, format!("teacher `{written}` is not a model directory on this machine")).hint("download or export it first (`rlx export runs/<id>@STEP` writes a checkpoint as a model directory) and name the directory"));
        return out;
    };
    let base = tree.span_of(&key.split('.').collect::<Vec<_>>()).source.base_dir.clone();
    let joined = if p.is_absolute() { p } else { base.join(p) };
    let abs = std::path::absolute(&joined).unwrap_or(joined);
    if !abs.join("config.json").is_file() {
        let mut e = err(key, format!("teacher `{written}` is not a model directory (no `config.json`)"));
        e.label = format!("resolved to {}", abs.display());
        out.push(e);
        return out;
    }
    d.teacher.base = abs.display().to_string();
    if let (Some(student), Some(teacher)) = (student, vocab(&abs))
        && let Some(why) = vocab_difference(&student, &teacher)
    {
        out.push(err(key, format!("teacher `{written}` has another tokenizer than the student: {why}")).hint("distillation compares the two models token by token; use a teacher with the student's tokenizer"));
    }
    out
}

/// The student's vocabulary, when its tokenizer is a directory on this machine.
fn student_tokenizer(spec: &Spec) -> Option<HashMap<String, u32>> {
    let written = spec.model.tokenizer.as_deref().unwrap_or(&spec.model.base);
    match ModelSource::parse(written, None).ok()? {
        ModelSource::Path(p) => vocab(&p),
        _ => None,
    }
}

/// The vocabulary of `dir/tokenizer.json` (added tokens included); `None` when there is none to
/// read (a `.gguf` file, a directory without one: nothing to compare).
fn vocab(dir: &Path) -> Option<HashMap<String, u32>> {
    let file: PathBuf = dir.join("tokenizer.json");
    let tok = tokenizers::Tokenizer::from_file(&file).ok()?;
    Some(tok.get_vocab(true))
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
