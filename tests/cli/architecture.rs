//! The layers of docs/architecture.md, checked on the source: every `crate::…` and `super::…`
//! path in `src/` is resolved to the module (file) it names, and
//!
//! 1. a top-level module may name only modules of a lower layer ([`LAYERS`]); in particular
//!    `spec` names nothing of rlx, and `backend` nothing of `plan`, `engine` or `cli`;
//! 2. no two files name each other through a chain of paths (no import cycle). A parent's `mod`
//!    declarations and `pub use` re-exports are its interface, not a use of its children, so they
//!    are not edges; everything else is (a child's `super::Error`, a sibling's `super::x::Y`).
//!
//! Unit tests (`#[cfg(test)]` to the end of a file) are left out: a test may build its inputs
//! with anything. Comments are stripped first, so a doc link is not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers, lowest first. A module may use modules of strictly lower layers.
const LAYERS: &[&[&str]] = &[
    &["spec", "calendar", "alloc", "causes", "hub", "rng", "quantile", "http_server", "dotenv"],
    &["rl"],
    &["seam"],
    &["data"],
    &["prompt", "sandbox"],
    &["tinker"],
    &["backend"],
    &["plan"],
    &["runlog"],
    &["health"],
    &["engine", "compare", "viewer", "sweep_sample", "sweep_slurm", "export"],
    &["serve"],
    &["cli"],
];

fn layer(top: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&top))
}

/// Module path (`backend::local::trainer`) → its file's text, without comments and tests.
fn modules(src: &Path) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            if path.extension().is_none_or(|e| e != "rs") {
                continue;
            }
            let rel: PathBuf = path.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel.components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
            if parts.last().is_some_and(|p| p == "mod") {
                parts.pop();
            }
            if parts == ["lib"] || parts == ["main"] {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            out.insert(parts.join("::"), strip(&text));
        }
    }
    out
}

/// The code of a file: line comments removed, everything from a `#[cfg(test)]` line on dropped.
fn strip(text: &str) -> String {
    let mut out = String::new();
    for line in text.lines() {
        if line.trim_start().starts_with("#[cfg(test)]") {
            break;
        }
        let code = match line.find("//") {
            // `//` inside a string (`"http://…"`) is preceded by a character other than space.
            Some(i) if i == 0 || line[..i].ends_with(' ') || line[..i].trim().is_empty() => &line[..i],
            _ => line,
        };
        out.push_str(code);
        out.push('\n');
    }
    out
}

/// Whether `line` only declares or re-exports (a parent's interface).
fn is_interface(line: &str) -> bool {
    let l = line.trim_start();
    l.starts_with("pub use ") || l.starts_with("pub(crate) use ") || l.starts_with("mod ") || l.starts_with("pub mod ") || l.starts_with("pub(crate) mod ")
}

/// The paths a file names, as segment lists rooted at the crate, with whether each comes from a
/// re-export line.
fn paths(module: &str, code: &str) -> Vec<(Vec<String>, bool)> {
    let me: Vec<&str> = module.split("::").collect();
    let mut out = vec![];
    // Statements end at `;`: a `use` group spans lines.
    for stmt in code.split_inclusive(';') {
        let interface = stmt.lines().find(|l| !l.trim().is_empty()).is_some_and(is_interface);
        for (prefix, base) in [("crate::", 0usize), ("super::", 1)] {
            let mut rest = stmt;
            while let Some(i) = rest.find(prefix) {
                let before = rest[..i].chars().last();
                rest = &rest[i + prefix.len()..];
                if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                    continue;
                }
                let mut root: Vec<String> = if base == 0 { vec![] } else { me[..me.len() - 1].iter().map(|s| s.to_string()).collect() };
                let mut tail = rest;
                // `super::super::`
                while base == 1 && tail.starts_with("super::") {
                    root.pop();
                    tail = &tail["super::".len()..];
                }
                for p in expand(tail) {
                    let mut full = root.clone();
                    full.extend(p);
                    out.push((full, interface));
                }
            }
        }
    }
    out
}

/// `a::b::{c, d::{e}}` → `[a,b,c]`, `[a,b,d,e]`; stops at the first character that is not part of
/// a path.
fn expand(text: &str) -> Vec<Vec<String>> {
    let mut segs = vec![];
    let mut cur = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        if c.is_alphanumeric() || c == '_' {
            cur.push(c);
        } else if text[i..].starts_with("::{") {
            segs.push(std::mem::take(&mut cur));
            let inner = &text[i + 3..];
            let mut depth = 1;
            let end = inner.char_indices().find(|&(_, ch)| {
                depth += match ch {
                    '{' => 1,
                    '}' => -1,
                    _ => 0,
                };
                depth == 0
            });
            let Some((end, _)) = end else { return vec![segs] };
            let mut out = vec![];
            let mut depth = 0;
            let mut start = 0;
            let body = &inner[..end];
            for (j, ch) in body.char_indices() {
                match ch {
                    '{' => depth += 1,
                    '}' => depth -= 1,
                    ',' if depth == 0 => {
                        out.push(body[start..j].trim().to_string());
                        start = j + 1;
                    }
                    _ => {}
                }
            }
            out.push(body[start..].trim().to_string());
            return out
                .into_iter()
                .filter(|p| !p.is_empty() && p != "self")
                .flat_map(|p| expand(&p))
                .map(|tail| segs.iter().cloned().chain(tail).collect())
                .chain(std::iter::once(segs.clone()))
                .collect();
        } else if text[i..].starts_with("::") {
            segs.push(std::mem::take(&mut cur));
            chars.next();
        } else {
            break;
        }
    }
    if !cur.is_empty() {
        segs.push(cur);
    }
    vec![segs]
}

/// The module a path names: its longest prefix that is a module.
fn resolve<'m>(path: &[String], modules: &'m BTreeMap<String, String>) -> Option<&'m str> {
    (1..=path.len()).rev().find_map(|n| modules.get_key_value(&path[..n].join("::")).map(|(k, _)| k.as_str()))
}

fn top(module: &str) -> &str {
    module.split("::").next().unwrap_or(module)
}

struct Graph {
    /// module → modules it uses (not counting re-exports of its own descendants).
    edges: BTreeMap<String, BTreeSet<String>>,
    /// Layer violations: (from, to).
    upward: Vec<(String, String)>,
}

fn graph(src: &Path) -> Graph {
    let mods = modules(src);
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut upward = vec![];
    for (m, code) in &mods {
        for (path, interface) in paths(m, code) {
            let Some(target) = resolve(&path, &mods) else { continue };
            if target == m {
                continue;
            }
            let (a, b) = (top(m), top(target));
            if a != b {
                let ok = matches!((layer(a), layer(b)), (Some(x), Some(y)) if y < x);
                if !ok {
                    upward.push((m.clone(), target.to_string()));
                }
            }
            let own_child = target.starts_with(&format!("{m}::"));
            if interface && own_child {
                continue;
            }
            edges.entry(m.clone()).or_default().insert(target.to_string());
        }
    }
    Graph { edges, upward }
}

/// Strongly connected components with more than one module (Tarjan).
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    struct T<'a> {
        edges: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(t: &mut T<'a>, v: &'a str) {
        let i = t.index.len();
        t.index.insert(v, i);
        t.low.insert(v, i);
        t.stack.push(v);
        t.on.insert(v);
        if let Some(ws) = t.edges.get(v) {
            for w in ws {
                let w = w.as_str();
                if !t.index.contains_key(w) {
                    visit(t, w);
                    let lw = t.low[w];
                    let lv = t.low[v];
                    t.low.insert(v, lv.min(lw));
                } else if t.on.contains(w) {
                    let iw = t.index[w];
                    let lv = t.low[v];
                    t.low.insert(v, lv.min(iw));
                }
            }
        }
        if t.low[v] == t.index[v] {
            let mut comp = vec![];
            while let Some(w) = t.stack.pop() {
                t.on.remove(w);
                comp.push(w.to_string());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                t.out.push(comp);
            }
        }
    }
    let mut t = T { edges, index: BTreeMap::new(), low: BTreeMap::new(), stack: vec![], on: BTreeSet::new(), out: vec![] };
    for v in edges.keys() {
        if !t.index.contains_key(v.as_str()) {
            visit(&mut t, v);
        }
    }
    t.out
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

#[test]
fn every_module_uses_only_lower_layers() {
    let g = graph(&src());
    let unknown: Vec<&str> = g.edges.keys().map(|m| top(m)).filter(|t| layer(t).is_none()).collect();
    assert!(unknown.is_empty(), "top-level modules missing from LAYERS (add them, and to docs/architecture.md): {unknown:?}");
    assert!(g.upward.is_empty(), "modules naming a module of their own or a higher layer (see docs/architecture.md):\n{}", g.upward.iter().map(|(a, b)| format!("  {a} -> {b}")).collect::<Vec<_>>().join("\n"));
}

#[test]
fn no_import_cycles() {
    let found = cycles(&graph(&src()).edges);
    assert!(found.is_empty(), "import cycles:\n{}", found.iter().map(|c| format!("  {}", c.join(" <-> "))).collect::<Vec<_>>().join("\n"));
}

/// The checker itself: it must see what it is meant to catch.
#[test]
fn the_checker_finds_upward_imports_and_cycles() {
    let dir = tempfile::tempdir().unwrap();
    let w = |p: &str, t: &str| {
        let f = dir.path().join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, t).unwrap();
    };
    w("spec/mod.rs", "pub mod a;\nuse crate::plan::Plan; // spec may not name plan\n");
    w("spec/a.rs", "use super::b::X;\n");
    w("spec/b.rs", "use crate::spec::a::{self, Y};\n// use crate::cli::nothing;\n");
    w("plan/mod.rs", "pub struct Plan;\nfn f() { let _ = crate::spec::a::Z; }\n");
    let g = graph(dir.path());
    assert_eq!(g.upward, vec![("spec".to_string(), "plan".to_string())]);
    assert_eq!(cycles(&g.edges), vec![vec!["spec::a".to_string(), "spec::b".to_string()]]);
    assert_eq!(expand("a::{b, c::{d, e}}; x"), vec![vec!["a", "b"], vec!["a", "c", "d"], vec!["a", "c", "e"], vec!["a", "c"], vec!["a"]]);
}
