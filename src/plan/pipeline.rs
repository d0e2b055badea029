//! The pipeline that makes a plan: read → parse to a located tree → apply overrides →
//! schema-validate the tree → deserialise → semantic checks ([`super::check`]) → resolve
//! ([`super::resolve`]) → hash ([`super::hash`]) → the settings a reopened run recorded
//! ([`super::record::reopened`]). Problems of every stage before deserialisation are collected
//! together, so a user sees all of them at once.

use std::path::Path;
use std::sync::Arc;

use super::check::{self, TemplateRef, normalize};
use super::distill::Checkpoints;
use super::hash::{self, sha256_hex};
use super::{record, resolve};
use super::types::{Error, Plan, Template, Written};
use crate::spec::diagnostic::{Diagnostic, Diagnostics};
use crate::spec::node::{self, Node};
use crate::spec::overrides::{self, Override};
use crate::spec::schema::Validator;
use crate::spec::source::Source;
use crate::spec::types::Spec;

/// Loads, overrides, validates and resolves a spec file.
///
/// # Errors
/// [`Error::Read`] when the file cannot be read; [`Error::Invalid`] with every problem found.
pub fn plan(path: &Path, overrides: &[Override]) -> Result<Plan, Error> {
    plan_with(path, overrides, None)
}

/// Like [`plan`], with `checkpoints` to find the run checkpoint a teacher reference
/// (`grpo.distill.teacher.base: runs/<id>@STEP`) names: the command line passes its own, since
/// run directories are read a layer above the plan. Without it such a reference is not
/// recognised.
///
/// # Errors
/// As [`plan`].
pub fn plan_with(path: &Path, overrides: &[Override], checkpoints: Option<&dyn Checkpoints>) -> Result<Plan, Error> {
    let text = crate::spec::source::read_spec(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
    plan_text_with(path, text, overrides, checkpoints)
}

/// Like [`plan`], for spec text already in memory (`path` names it in messages and anchors
/// relative paths).
///
/// # Errors
/// As [`plan`].
pub fn plan_text(path: &Path, text: String, overrides: &[Override]) -> Result<Plan, Error> {
    plan_text_with(path, text, overrides, None)
}

/// [`plan_text`] with `checkpoints`, as [`plan_with`].
///
/// # Errors
/// As [`plan`].
pub fn plan_text_with(path: &Path, text: String, overrides: &[Override], checkpoints: Option<&dyn Checkpoints>) -> Result<Plan, Error> {
    let abs = std::path::absolute(path).map(|p| normalize(&p)).unwrap_or_else(|_| path.to_path_buf());
    let invalid = |diagnostics: Vec<Diagnostic>| Error::Invalid { path: path.to_path_buf(), diagnostics: Diagnostics(diagnostics) };
    // Messages name the file as the user wrote it; relative paths inside resolve from its directory.
    let mut source = Source::file(path, text.clone());
    if let Some(s) = Arc::get_mut(&mut source) {
        s.base_dir = abs.parent().map(Path::to_path_buf).unwrap_or_default();
    }
    let mut tree = node::parse(&source).map_err(invalid)?;
    let mut diags = vec![];
    for ov in overrides {
        if let Err(d) = overrides::apply(&mut tree, ov) {
            diags.push(d);
        }
    }
    diags.extend(Validator::new().validate(&tree));
    if !diags.is_empty() {
        diags.extend(semantic_despite_schema_errors(&tree, &diags, checkpoints));
        return Err(invalid(diags));
    }
    let mut spec: Spec = serde_json::from_value(tree.to_json()).map_err(|e| {
        invalid(vec![Diagnostic::new(format!("spec does not match its schema: {e}"), Some(tree.span.clone()))])
    })?;
    let checked = check::check(&mut spec, &tree, checkpoints).map_err(invalid)?;
    let templates: Vec<Template> = checked.templates.into_iter().map(template).collect();
    // The Python reward's text is part of the experiment, as the templates' are (only specs
    // with one hash it, so every other run id stays as it was).
    let mut hashed = templates.clone();
    if let Some(path) = spec.reward.path.as_deref().filter(|_| crate::rl::reward::uses_python(&spec.reward)) {
        let text = std::fs::read(path).unwrap_or_default();
        hashed.push(Template { role: "reward.path".into(), path: path.into(), sha256: sha256_hex(&text), text: String::new() });
    }
    let hash = hash::spec_hash(&spec, &abs, &hashed);
    let written = Written { spec, path: abs, text, overrides: overrides.iter().map(Override::canonical).collect(), templates };
    let plan = resolve::resolve(written, hash).map_err(|e| invalid(vec![Diagnostic::new(format!("`model`: {e}"), Some(tree.span.clone()))]))?;
    Ok(record::reopened(plan))
}

fn template(t: TemplateRef) -> Template {
    Template { role: t.role, sha256: sha256_hex(t.text.as_bytes()), path: t.path, text: t.text }
}

/// Runs the semantic checks on the tree with the schema's offending values removed (so defaults
/// take their place), so that a file's problems of both kinds show up in one report. When the
/// pruned tree still cannot be read (a required section is broken), there is nothing to add.
fn semantic_despite_schema_errors(tree: &Node, schema_diags: &[Diagnostic], checkpoints: Option<&dyn Checkpoints>) -> Vec<Diagnostic> {
    let mut pruned = tree.clone();
    let mut removed: Vec<String> = vec![];
    for d in schema_diags {
        let Some(p) = &d.path else { return vec![] };
        let dotted = p.replace('[', ".").replace(']', "");
        let segs: Vec<&str> = dotted.split('.').collect();
        pruned.remove(&segs);
        removed.push(dotted);
    }
    let Ok(mut spec) = serde_json::from_value::<Spec>(pruned.to_json()) else { return vec![] };
    let touches = |d: &Diagnostic| {
        d.path.as_ref().is_some_and(|p| {
            let p = p.replace('[', ".").replace(']', "");
            removed.iter().any(|r| p.starts_with(r.as_str()) || r.starts_with(p.as_str()))
        })
    };
    match check::check(&mut spec, &pruned, checkpoints) {
        Ok(_) => vec![],
        Err(sem) => sem.into_iter().filter(|d| !touches(d)).collect(),
    }
}

/// Parses the located tree of a spec file after overrides, without checking it (for sweeps,
/// which need to know what a key holds before forming the grid).
pub fn tree(path: &Path) -> Result<Node, Error> {
    let text = crate::spec::source::read_spec(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
    let source = Source::file(path, text);
    node::parse(&source).map_err(|d| Error::Invalid { path: path.to_path_buf(), diagnostics: Diagnostics(d) })
}
