//! The run id's hash: what makes two runs the same experiment, and the canonical forms it hashes.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::Template;
use crate::spec::Spec;

/// Hex SHA-256.
pub fn sha256_hex(bytes: &[u8]) -> String {
    let digest = Sha256::digest(bytes);
    digest.iter().map(|b| format!("{b:02x}")).collect()
}

/// The short hash of what defines an experiment.
///
/// It covers the resolved spec (defaults included, so changing a default in a later rlx version
/// changes the id rather than silently reusing a run) and the templates' contents, and leaves out
/// what does not change results: `description`, `log`, `sweep` (where the run executes) and `diagnostics` (watching a run does not change it). Local paths are hashed relative to
/// the spec's directory, so a checkout moved elsewhere keeps its run ids.
pub(crate) fn spec_hash(spec: &Spec, spec_path: &Path, templates: &[Template]) -> String {
    let mut v = serde_json::to_value(spec).expect("a spec serialises");
    if let Some(obj) = v.as_object_mut() {
        obj.remove("description");
        obj.remove("log");
        obj.remove("sweep");
        obj.remove("diagnostics");
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
pub(crate) fn lexical_relative(path: &Path, base: &Path) -> Option<PathBuf> {
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
pub(crate) fn canonical_json(v: &serde_json::Value) -> String {
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
