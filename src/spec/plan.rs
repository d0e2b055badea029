//! From a spec file and overrides to a [`Plan`]: the resolved spec every later stage reads, with
//! its run id.
//!
//! The pipeline: read → parse to a located tree → apply overrides → schema-validate the tree →
//! deserialise → semantic checks (files, templates, cross-field rules) → hash. Problems of every
//! stage before deserialisation are collected together, so a user sees all of them at once.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Serialize;
use sha2::{Digest, Sha256};

use super::check::{self, TemplateRef, normalize};
use super::diagnostic::{Diagnostic, Diagnostics};
use super::node::{self, Node};
use super::overrides::{self, Override};
use super::schema::Validator;
use super::source::Source;
use super::resolved::Resolved;
use super::types::Spec;

/// Why a spec could not be planned.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The spec file could not be read.
    #[error("cannot read spec `{path}`")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The spec (or an override, or a template) is invalid; every problem found.
    #[error("{} problem(s) in spec `{}`", .diagnostics.0.len(), .path.display())]
    Invalid {
        /// The file.
        path: PathBuf,
        /// The problems.
        diagnostics: Diagnostics,
    },
}

/// A template the plan uses, with its content hash (for provenance and the run id).
#[derive(Debug, Clone, Serialize)]
pub struct Template {
    /// The key that names it (`prompt.user`).
    pub role: String,
    /// Absolute path.
    pub path: PathBuf,
    /// SHA-256 of its text, hex.
    pub sha256: String,
    /// Its text.
    #[serde(skip)]
    pub text: String,
}

/// A resolved, checked experiment: everything a run needs to start.
#[derive(Debug, Clone)]
pub struct Plan {
    /// The spec after overrides and defaults, with absolute paths (as written: what
    /// `resolved.json` records and the run id hashes).
    pub spec: Spec,
    /// The values the program uses, resolved from `spec`.
    pub resolved: Resolved,
    /// The spec file (absolute).
    pub spec_path: PathBuf,
    /// The spec file's text as written.
    pub spec_text: String,
    /// Overrides applied, in order, with aliases expanded (`optimizer.learning_rate=2e-5`).
    pub overrides: Vec<String>,
    /// The templates it renders.
    pub templates: Vec<Template>,
    /// Short hash of the resolved spec (what makes two runs the same experiment).
    pub hash: String,
    /// `<name>-<hash>`: the run directory's name.
    pub run_id: String,
}

/// Loads, overrides, validates and resolves a spec file.
///
/// # Errors
/// [`Error::Read`] when the file cannot be read; [`Error::Invalid`] with every problem found.
pub fn plan(path: &Path, overrides: &[Override]) -> Result<Plan, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
    plan_text(path, text, overrides)
}

/// Like [`plan`], for spec text already in memory (`path` names it in messages and anchors
/// relative paths).
pub fn plan_text(path: &Path, text: String, overrides: &[Override]) -> Result<Plan, Error> {
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
        diags.extend(semantic_despite_schema_errors(&tree, &diags));
        return Err(invalid(diags));
    }
    let mut spec: Spec = serde_json::from_value(tree.to_json()).map_err(|e| {
        invalid(vec![Diagnostic::new(format!("spec does not match its schema: {e}"), Some(tree.span.clone()))])
    })?;
    let checked = check::check(&mut spec, &tree).map_err(invalid)?;
    let resolved = Resolved::new(&spec).map_err(|e| invalid(vec![Diagnostic::new(format!("`model`: {e}"), Some(tree.span.clone()))]))?;
    let templates: Vec<Template> = checked.templates.into_iter().map(template).collect();
    let hash = spec_hash(&spec, &abs, &templates);
    let run_id = format!("{}-{hash}", spec.name);
    Ok(Plan {
        spec,
        resolved,
        spec_path: abs,
        spec_text: text,
        overrides: overrides.iter().map(Override::canonical).collect(),
        templates,
        hash,
        run_id,
    })
}

/// Runs the semantic checks on the tree with the schema's offending values removed (so defaults
/// take their place), so that a file's problems of both kinds show up in one report. When the
/// pruned tree still cannot be read (a required section is broken), there is nothing to add.
fn semantic_despite_schema_errors(tree: &Node, schema_diags: &[Diagnostic]) -> Vec<Diagnostic> {
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
    match check::check(&mut spec, &pruned) {
        Ok(_) => vec![],
        Err(sem) => sem.into_iter().filter(|d| !touches(d)).collect(),
    }
}

/// Parses the located tree of a spec file after overrides, without checking it (for sweeps,
/// which need to know what a key holds before forming the grid).
pub fn tree(path: &Path) -> Result<Node, Error> {
    let text = std::fs::read_to_string(path).map_err(|source| Error::Read { path: path.to_path_buf(), source })?;
    let source = Source::file(path, text);
    node::parse(&source).map_err(|d| Error::Invalid { path: path.to_path_buf(), diagnostics: Diagnostics(d) })
}

fn template(t: TemplateRef) -> Template {
    Template { role: t.role, sha256: sha256_hex(t.text.as_bytes()), path: t.path, text: t.text }
}

/// Hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The short hash of what defines an experiment.
///
/// It covers the resolved spec (defaults included, so changing a default in a later rlx version
/// changes the id rather than silently reusing a run) and the templates' contents, and leaves out
/// what does not change results: `description`, `log` and `sweep` (where the run executes). Local paths are hashed relative to
/// the spec's directory, so a checkout moved elsewhere keeps its run ids.
pub fn spec_hash(spec: &Spec, spec_path: &Path, templates: &[Template]) -> String {
    let mut v = serde_json::to_value(spec).expect("a spec serialises");
    if let Some(obj) = v.as_object_mut() {
        obj.remove("description");
        obj.remove("log");
        obj.remove("sweep");
    }
    let base = spec_path.parent().unwrap_or(Path::new("/"));
    relativize(&mut v, base);
    let mut h = Sha256::new();
    h.update(canonical_json(&v).as_bytes());
    for t in templates {
        h.update(t.role.as_bytes());
        h.update(t.sha256.as_bytes());
    }
    h.finalize().iter().take(5).map(|b| format!("{b:02x}")).collect()
}

fn relativize(v: &mut serde_json::Value, base: &Path) {
    match v {
        serde_json::Value::String(s) if s.starts_with('/') => {
            if let Some(rel) = lexical_relative(Path::new(s.as_str()), base) {
                *s = rel.display().to_string();
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(|i| relativize(i, base)),
        serde_json::Value::Object(m) => m.values_mut().for_each(|i| relativize(i, base)),
        _ => {}
    }
}

/// `path` relative to `base`, both absolute and normalised, going up with `..` as needed.
pub fn lexical_relative(path: &Path, base: &Path) -> Option<PathBuf> {
    let p: Vec<_> = path.components().collect();
    let b: Vec<_> = base.components().collect();
    let common = p.iter().zip(&b).take_while(|(x, y)| x == y).count();
    if common == 0 {
        return None;
    }
    let mut out = PathBuf::new();
    for _ in common..b.len() {
        out.push("..");
    }
    for c in &p[common..] {
        out.push(c.as_os_str());
    }
    Some(out)
}

/// JSON with object keys sorted at every level, so equal values hash equally whatever the order
/// they were written in.
pub fn canonical_json(v: &serde_json::Value) -> String {
    match v {
        serde_json::Value::Object(m) => {
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            let body: Vec<String> = keys.iter().map(|k| format!("{}:{}", serde_json::Value::String((*k).clone()), canonical_json(&m[*k]))).collect();
            format!("{{{}}}", body.join(","))
        }
        serde_json::Value::Array(items) => format!("[{}]", items.iter().map(canonical_json).collect::<Vec<_>>().join(",")),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn canonical_json_sorts_keys() {
        let a: serde_json::Value = serde_json::from_str(r#"{"b": 1, "a": {"d": [1, {"y": 2, "x": 1}], "c": null}}"#).unwrap();
        assert_eq!(canonical_json(&a), r#"{"a":{"c":null,"d":[1,{"x":1,"y":2}]},"b":1}"#);
    }

    #[test]
    fn relative_paths() {
        assert_eq!(lexical_relative(Path::new("/r/prompts/a.j2"), Path::new("/r/experiments")), Some(PathBuf::from("../prompts/a.j2")));
        assert_eq!(lexical_relative(Path::new("/r/x"), Path::new("/r")), Some(PathBuf::from("x")));
    }
}
