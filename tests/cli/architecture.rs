//! The layers of docs/architecture.md, checked on the source of both crates (`src/` and
//! `crates/*/src/`): every path is resolved to the module (file) it names — `crate::…`,
//! `super::…` and `self::…` paths, and bare paths that start with a name the file brings into
//! scope (a child declared with `mod`, or a `use` binding, aliases with `as` included: after
//! `use super::decode;`, `decode::batch::run` names `decode/batch.rs`) — and
//!
//! 1. a top-level module of rlx may name only modules of a lower layer ([`LAYERS`]); in
//!    particular `spec` names nothing of rlx, and `backend` nothing of `plan`, `engine` or `cli`;
//! 2. no two files name each other through a chain of paths (no import cycle). A parent's `mod`
//!    declarations and `pub use` re-exports of its own children are its interface, not a use of
//!    them, so they are not edges; everything else is, so a parent that calls into a child
//!    which names the parent back (`super::Error`) is the cycle it is. Any cycle fails (a
//!    ratchet: `the_ratchet_fails_on_a_new_parent_child_cycle` shows it on a new knot);
//! 3. no file of the engine names its parent (`engine/mod.rs` is a face).
//!
//! Unit tests (`#[cfg(test)]` to the end of a file) are left out: a test may build its inputs
//! with anything. Comments are stripped first, so a doc link is not an import.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Layers, lowest first. A module may use modules of strictly lower layers.
const LAYERS: &[&[&str]] = &[
    &["switches"],
    &["spec", "calendar", "alloc", "causes", "hub", "rng", "quantile", "retry", "http_server", "dotenv"],
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

/// Module path (`backend::local::trainer`, or `rlx_kernels::dot` for a second crate's `prefix`)
/// → its file's text, without comments and tests.
fn modules(src: &Path, prefix: &str) -> BTreeMap<String, String> {
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
            if !prefix.is_empty() {
                parts.insert(0, prefix.to_string());
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

/// The names a file brings into scope, each with the crate-rooted path it stands for: its
/// children (`mod x;`) and its `use` bindings (`use a::b;` binds `b`, `use a::{self, c as d};`
/// binds `a` and `d`). `root` is the crate's prefix (empty for rlx).
fn bindings(me: &[&str], root: &[String], code: &str) -> BTreeMap<String, Vec<String>> {
    let mut out = BTreeMap::new();
    for stmt in code.split_inclusive(';') {
        let l = stmt.trim_start();
        let l = l.strip_prefix("pub(crate) ").or_else(|| l.strip_prefix("pub(super) ")).or_else(|| l.strip_prefix("pub ")).unwrap_or(l);
        if let Some(name) = l.strip_prefix("mod ").and_then(|r| r.strip_suffix(';')) {
            let name = name.trim();
            if name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                out.insert(name.to_string(), me.iter().map(|s| s.to_string()).chain([name.to_string()]).collect());
            }
            continue;
        }
        let Some(tree) = l.strip_prefix("use ").and_then(|r| r.strip_suffix(';')) else { continue };
        for (path, alias) in use_leaves(tree) {
            let Some(full) = rooted(me, root, &path, &out) else { continue };
            let name = alias.or_else(|| path.last().cloned()).unwrap_or_default();
            if !name.is_empty() && name != "_" && name != "*" {
                out.insert(name, full);
            }
        }
    }
    out
}

/// The leaves of a `use` tree with their aliases: `a::{self, b as c, d::*}` → `([a], None)`,
/// `([a, b], Some(c))`, `([a, d, *], None)`.
fn use_leaves(tree: &str) -> Vec<(Vec<String>, Option<String>)> {
    let tree = tree.trim();
    let Some(open) = tree.find('{') else {
        let (path, alias) = match tree.split_once(" as ") {
            Some((p, a)) => (p.trim(), Some(a.trim().to_string())),
            None => (tree, None),
        };
        return vec![(path.split("::").map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect(), alias)];
    };
    let prefix: Vec<String> = tree[..open].split("::").map(|s| s.trim().to_string()).filter(|s| !s.is_empty()).collect();
    let body = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
    let (mut parts, mut depth, mut start) = (vec![], 0, 0);
    for (j, ch) in body.char_indices() {
        match ch {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&body[start..j]);
                start = j + 1;
            }
            _ => {}
        }
    }
    parts.push(&body[start..]);
    let mut out = vec![];
    for part in parts.into_iter().map(str::trim).filter(|p| !p.is_empty()) {
        if part == "self" || part.starts_with("self as ") {
            out.push((prefix.clone(), part.strip_prefix("self as ").map(|a| a.trim().to_string())));
            continue;
        }
        for (tail, alias) in use_leaves(part) {
            out.push((prefix.iter().cloned().chain(tail).collect(), alias));
        }
    }
    out
}

/// `path` rooted at the crate: `crate::`, `super::` and `self::` resolved from module `me`, a
/// first segment bound by `names` replaced by what it stands for; `None` for a path outside the
/// crate (`std::…`).
fn rooted(me: &[&str], root: &[String], path: &[String], names: &BTreeMap<String, Vec<String>>) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String>;
    let mut rest = &path[1..];
    match first.as_str() {
        "crate" => base = root.to_vec(),
        "self" => base = me.iter().map(|s| s.to_string()).collect(),
        "super" => {
            base = me[..me.len().saturating_sub(1)].iter().map(|s| s.to_string()).collect();
            while rest.first().is_some_and(|s| s == "super") {
                base.pop();
                rest = &rest[1..];
            }
        }
        name => base = names.get(name)?.clone(),
    }
    base.extend(rest.iter().cloned());
    Some(base)
}

/// The paths a file names, as segment lists rooted at the crate, with whether each comes from a
/// re-export or `mod` line (the file's interface).
fn paths(module: &str, root: &[String], code: &str) -> Vec<(Vec<String>, bool)> {
    let me: Vec<&str> = module.split("::").collect();
    let names = bindings(&me, root, code);
    let mut out = vec![];
    // Statements end at `;`: a `use` group spans lines.
    for stmt in code.split_inclusive(';') {
        let interface = stmt.lines().find(|l| !l.trim().is_empty()).is_some_and(is_interface);
        // Every `ident::` not preceded by a path character starts a path.
        let bytes = stmt.as_bytes();
        let mut i = 0;
        while let Some(off) = stmt[i..].find("::") {
            let at = i + off;
            i = at + 2;
            let start = stmt[..at].rfind(|c: char| !(c.is_alphanumeric() || c == '_')).map_or(0, |p| p + 1);
            if start == at || (start > 0 && bytes[start - 1] == b':') {
                continue;
            }
            let first = stmt[start..at].to_string();
            if !(first == "crate" || first == "super" || first == "self" || names.contains_key(&first)) {
                continue;
            }
            for tail in expand(&stmt[at + 2..]) {
                let path: Vec<String> = std::iter::once(first.clone()).chain(tail).collect();
                if let Some(full) = rooted(&me, root, &path, &names) {
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
        } else if let Some(inner) = text[i..].strip_prefix("::{").or_else(|| text.strip_prefix('{').filter(|_| i == 0)) {
            // `a::{…}`, or a group right after the path's first segment (`super::{a, b}`).
            if !cur.is_empty() {
                segs.push(std::mem::take(&mut cur));
            }
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
            // The group's prefix is named only by a `self` in it: `use super::{a, b};` names the
            // siblings a and b, not the parent (each leaf that is an item resolves to its module).
            let named = out.iter().any(|p| p == "self" || p.starts_with("self as "));
            return out
                .into_iter()
                .filter(|p| !p.is_empty() && p != "self" && !p.starts_with("self as "))
                .flat_map(|p| expand(&p))
                .map(|tail| segs.iter().cloned().chain(tail).collect())
                .chain(named.then(|| segs.clone()))
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

/// The module graph of the crates whose sources are `roots` (directory, module prefix: empty
/// for rlx, the crate's name for the others, whose modules are only checked for cycles).
fn graph(roots: &[(PathBuf, &str)]) -> Graph {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut upward = vec![];
    for (src, prefix) in roots {
        let mods = modules(src, prefix);
        let root: Vec<String> = if prefix.is_empty() { vec![] } else { vec![prefix.to_string()] };
        for (m, code) in &mods {
            for (path, interface) in paths(m, &root, code) {
                let Some(target) = resolve(&path, &mods) else { continue };
                if target == m {
                    continue;
                }
                let (a, b) = (top(m), top(target));
                if a != b && prefix.is_empty() {
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

/// rlx's sources and every workspace crate's under `crates/`.
fn roots() -> Vec<(PathBuf, &'static str)> {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut out = vec![(repo.join("src"), "")];
    let mut crates: Vec<PathBuf> = std::fs::read_dir(repo.join("crates")).into_iter().flatten().filter_map(|e| e.ok().map(|e| e.path().join("src"))).filter(|p| p.is_dir()).collect();
    crates.sort();
    for c in crates {
        let name = c.parent().and_then(|p| p.file_name()).map(|n| format!("rlx_{}", n.to_string_lossy())).unwrap_or_default();
        out.push((c, Box::leak(name.into_boxed_str())));
    }
    out
}

#[test]
fn every_module_uses_only_lower_layers() {
    let g = graph(&roots());
    let unknown: Vec<&str> = g.edges.keys().map(|m| top(m)).filter(|t| !t.starts_with("rlx_") && layer(t).is_none()).collect();
    assert!(unknown.is_empty(), "top-level modules missing from LAYERS (add them, and to docs/architecture.md): {unknown:?}");
    assert!(g.upward.is_empty(), "modules naming a module of their own or a higher layer (see docs/architecture.md):\n{}", g.upward.iter().map(|(a, b)| format!("  {a} -> {b}")).collect::<Vec<_>>().join("\n"));
}

/// The ratchet: an error naming every import cycle in `found`, none tolerated.
fn ratchet(found: &[Vec<String>]) -> Result<(), String> {
    if found.is_empty() {
        return Ok(());
    }
    let lines: Vec<String> = found.iter().map(|c| format!("  {}", c.join(" <-> "))).collect();
    Err(format!("import cycles (docs/architecture.md, \"Break an import cycle\", says how to break one):\n{}", lines.join("\n")))
}

#[test]
fn no_import_cycles() {
    let found = cycles(&graph(&roots()).edges);
    if let Err(e) = ratchet(&found) {
        panic!("{e}");
    }
}

/// What `no_import_cycles` does, on a tree with a new parent↔child knot: it fails, naming it.
/// Beside it, the recipe half applied (the type moved into a child but named through the parent's
/// re-export, while the parent still calls a child: the path resolves to the parent, so the knot
/// stays) and fully applied (the parent a face; no cycle).
#[test]
fn the_ratchet_fails_on_a_new_parent_child_cycle() {
    let dir = tempfile::tempdir().unwrap();
    let w = |p: &str, t: &str| {
        let f = dir.path().join("src").join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(f, t).unwrap();
    };
    let check = || ratchet(&cycles(&graph(&[(dir.path().join("src"), "")]).edges));
    // The recipe applied: the parent declares and re-exports; its type and its code are children.
    w("tool/mod.rs", "mod part;\nmod run;\nmod types;\npub use run::run;\npub use types::Tool;\n");
    w("tool/types.rs", "pub struct Tool;\n");
    w("tool/part.rs", "use super::types::Tool;\npub(crate) fn go(_: Tool) {}\n");
    w("tool/run.rs", "use super::{part, types};\npub fn run() { part::go(types::Tool); }\n");
    assert_eq!(check(), Ok(()));
    // A group of siblings names them, not the parent its prefix spells.
    assert_eq!(graph(&[(dir.path().join("src"), "")]).edges["tool::run"], BTreeSet::from(["tool::part".to_string(), "tool::types".to_string()]));
    // A child names its parent's type; the parent calls the child.
    w("widget/mod.rs", "mod part;\npub struct Widget;\npub fn run() { part::go(Widget); }\n");
    w("widget/part.rs", "use super::Widget;\npub(crate) fn go(_: Widget) {}\n");
    // The type moved to `types`, but named through the parent's `pub use`.
    w("gadget/mod.rs", "mod part;\nmod types;\npub use types::Gadget;\npub fn run() { part::go(); }\n");
    w("gadget/types.rs", "pub struct Gadget;\n");
    w("gadget/part.rs", "use crate::gadget::Gadget;\npub(crate) fn go() -> Option<Gadget> { None }\n");
    let err = check().unwrap_err();
    assert!(err.contains("\n  gadget <-> gadget::part") && err.contains("\n  widget <-> widget::part"), "{err}");
    assert_eq!(err.lines().count(), 3, "the two knots only: {err}");
}

/// Arrows from a module of the engine to its parent or an ancestor inside the folder: the
/// engine's face (mod.rs) is below none of its parts.
#[test]
fn nothing_in_the_engine_names_its_parent() {
    let g = graph(&roots()[..1]);
    let up: Vec<String> = g.edges.iter().filter(|(m, _)| m.starts_with("engine::")).flat_map(|(m, ts)| ts.iter().filter(move |t| m.starts_with(&format!("{t}::"))).map(move |t| format!("{m} -> {t}"))).collect();
    assert!(up.is_empty(), "engine modules naming their parent:\n  {}", up.join("\n  "));
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
    let src = dir.path().join("src");
    w("src/spec/mod.rs", "pub mod a;\nuse crate::plan::Plan; // spec may not name plan\n");
    w("src/spec/a.rs", "use super::b::X;\n");
    w("src/spec/b.rs", "use crate::spec::a::{self, Y};\n// use crate::cli::nothing;\n");
    w("src/plan/mod.rs", "pub struct Plan;\nfn f() { let _ = crate::spec::a::Z; }\n");
    let g = graph(&[(src.clone(), "")]);
    assert_eq!(g.upward, vec![("spec".to_string(), "plan".to_string())]);
    assert_eq!(cycles(&g.edges), vec![vec!["spec::a".to_string(), "spec::b".to_string()]]);
    assert_eq!(expand("a::{b, c::{self, d, e}}; x"), vec![vec!["a", "b"], vec!["a", "c", "d"], vec!["a", "c", "e"], vec!["a", "c"]]);
    assert_eq!(expand("{b, c::d};"), vec![vec!["b"], vec!["c", "d"]]);

    // A bare path through a sibling the file imported: `use super::c;` then `c::d::f()`.
    w("src/rl/mod.rs", "mod c;\nmod x;\n");
    w("src/rl/x.rs", "use super::c;\nfn g() { c::d::f(); }\n");
    w("src/rl/c/mod.rs", "pub(crate) mod d;\n");
    w("src/rl/c/d.rs", "pub(crate) fn f() { crate::rl::x::h(); }\n");
    // An alias: `use super::y as why;` then `why::w::k()` (the `use` line alone names y).
    w("src/data/mod.rs", "mod y;\nmod z;\n");
    w("src/data/y/mod.rs", "pub(crate) mod w;\n");
    w("src/data/y/w.rs", "pub(crate) fn k() { super::super::z::m(); }\n");
    w("src/data/z.rs", "use super::y as why;\npub(crate) fn m() { why::w::k(); }\n");
    // A parent that calls into its child (bare: the child is declared here) while the child
    // names the parent back; re-exports alone are not edges.
    w("src/seam/mod.rs", "mod p;\npub use p::Q;\npub struct E;\nfn run() { p::go(); }\n");
    w("src/seam/p.rs", "use super::E;\npub struct Q;\npub(crate) fn go() {}\n");
    w("src/prompt/mod.rs", "mod r;\npub use r::S;\npub struct F;\n");
    w("src/prompt/r.rs", "use super::F;\npub struct S;\n");
    // A cycle inside a second crate.
    w("crates/k/src/lib.rs", "pub mod dot;\npub mod quant;\n");
    w("crates/k/src/dot.rs", "use crate::quant::BLOCK;\n");
    w("crates/k/src/quant.rs", "use crate::dot::{self, ROWS};\nfn f() { dot::q(); }\n");
    let g = graph(&[(src, ""), (dir.path().join("crates/k/src"), "rlx_k")]);
    let found = cycles(&g.edges);
    for cycle in [vec!["rl::c::d", "rl::x"], vec!["data::y::w", "data::z"], vec!["seam", "seam::p"], vec!["rlx_k::dot", "rlx_k::quant"], vec!["spec::a", "spec::b"]] {
        assert!(found.contains(&cycle.iter().map(|s| s.to_string()).collect()), "missed {cycle:?} in {found:?}");
    }
    assert_eq!(found.len(), 5, "only those: {found:?}");
}
