//! Command-line overrides (`optimizer.learning_rate=2e-5`, `lr=2e-5`) and sweep axes
//! (`lr=[1e-5,4e-5]`, `seed=0,1,2`).
//!
//! An override edits the located YAML tree before typed parsing, so a value from the command line
//! goes through exactly the same schema and semantic checks as one written in the file, and its
//! errors point into the command-line text (`command line:1:4`). Values are YAML: `lr=1e-5` is a
//! number, `name=abc` a string, `sampling.stop=["```"]` a list.
//!
//! Grammar: `PATH=VALUE` where PATH is dot-separated keys (`[A-Za-z_][A-Za-z0-9_-]*`) or list
//! indices (`data.train.0.path`), or one of the short aliases in [`super::schema::ALIASES`].
//! `~PATH` removes the key (Hydra's delete form), so that a key the new value makes invalid can
//! go with it: `backend.kind=tinker ~backend.max_tokens_per_microbatch`. (Rejected: `PATH=` or
//! `PATH=null`, which set the key to null; a key another variant owns is wrong even when null.)
//! In `rlx sweep`, a value `[a, b]` or `a,b` is an axis of the grid (unless the key itself holds
//! a list: then `[[1],[1,5]]` or `[1],[1,5]` is the axis, and a flat list is one value).

use std::sync::Arc;

use super::diagnostic::Diagnostic;
use super::node::{self, Entry, Node, Value};
use super::schema::{Validator, expand_alias};
use super::source::{Source, Span};

/// One parsed `PATH=VALUE` argument.
#[derive(Debug, Clone)]
pub struct Override {
    /// The key path after alias expansion.
    pub path: Vec<String>,
    /// The value, located in the command-line text.
    pub value: Node,
    /// Where the key is written.
    pub key_span: Span,
    /// The argument as given.
    pub raw: String,
}

impl Override {
    /// The dotted key path.
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }

    /// `PATH=VALUE` with the expanded path, as recorded in provenance and sweep records
    /// (`~PATH` for a removal).
    pub fn canonical(&self) -> String {
        if self.removes() {
            return format!("~{}", self.dotted());
        }
        format!("{}={}", self.dotted(), self.value.span.text().trim())
    }

    /// Whether it is `~PATH`: the key is removed rather than set.
    pub fn removes(&self) -> bool {
        self.raw.starts_with('~')
    }
}

/// A sweep axis: one key and the values it takes.
#[derive(Debug, Clone)]
pub struct Axis {
    /// The key path after alias expansion.
    pub path: Vec<String>,
    /// The values, each located in the command-line text.
    pub values: Vec<Node>,
    /// Where the key is written.
    pub key_span: Span,
    /// The argument as given.
    pub raw: String,
}

impl Axis {
    /// The dotted key path.
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }

    /// True for `seed`: its runs are replicates of one configuration, not different ones.
    pub fn is_replicate(&self) -> bool {
        self.path == ["seed"]
    }

    /// The override that sets this axis to its `i`-th value.
    pub fn at(&self, i: usize) -> Override {
        Override { path: self.path.clone(), value: self.values[i].clone(), key_span: self.key_span.clone(), raw: self.raw.clone() }
    }
}

/// A command-line argument of `rlx sweep`: a fixed override or an axis.
#[derive(Debug, Clone)]
pub enum SweepArg {
    /// The same value in every run.
    Fixed(Override),
    /// One value per run of the grid.
    Axis(Axis),
}

/// Whether a command-line argument is a `PATH=VALUE` or `~PATH` override (rather than a spec
/// path; `~/specs/a.yaml` is a path).
pub fn looks_like_override(arg: &str) -> bool {
    if let Some(key) = arg.strip_prefix('~') {
        return !key.is_empty() && !key.contains(['/', '\\', '=']);
    }
    match arg.split_once('=') {
        Some((k, _)) => !k.is_empty() && !k.contains(['/', '\\']),
        None => false,
    }
}

/// Splits `PATH=VALUE`, checks the path's syntax, expands aliases: the source, the path, the
/// key's span and where the value starts.
pub(crate) fn split(arg: &str) -> Result<(Arc<Source>, Vec<String>, Span, usize), Diagnostic> {
    let source = Source::cli(arg);
    let Some(eq) = arg.find('=') else {
        return Err(Diagnostic::new(format!("expected `KEY=VALUE`, found `{arg}`"), Some(Span::new(&source, 0..arg.len())))
            .hint("for example `optimizer.learning_rate=2e-5` or `lr=2e-5`"));
    };
    let key_span = Span::new(&source, 0..eq);
    if eq == 0 {
        return Err(Diagnostic::new("missing key before `=`", Some(key_span)));
    }
    let path = key_path(&arg[..eq], &key_span)?;
    Ok((source, path, key_span, eq + 1))
}

/// The key path of `key` (aliases expanded), its syntax checked.
fn key_path(key: &str, key_span: &Span) -> Result<Vec<String>, Diagnostic> {
    for seg in key.split('.') {
        let ok = !seg.is_empty()
            && (seg.bytes().all(|b| b.is_ascii_digit())
                || (seg.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
                    && seg.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')));
        if !ok {
            return Err(Diagnostic::new(format!("invalid key `{key}`"), Some(key_span.clone()))
                .label("keys are names separated by `.`")
                .hint("for example `optimizer.learning_rate=2e-5` or `data.train.0.path=x.jsonl`"));
        }
    }
    Ok(expand_alias(key).split('.').map(str::to_string).collect())
}

/// Parses `~PATH`, the removal of a key; `None` when `arg` is not of that form.
fn parse_removal(arg: &str) -> Option<Result<Override, Diagnostic>> {
    let key = arg.strip_prefix('~').filter(|k| !k.contains('='))?;
    let source = Source::cli(arg);
    let key_span = Span::new(&source, 1..arg.len());
    let value = Node { value: Value::Null, span: Span::new(&source, arg.len()..arg.len()) };
    Some(key_path(key, &key_span).map(|path| Override { path, value, key_span, raw: arg.to_string() }))
}

/// Parses one `PATH=VALUE` or `~PATH` override.
pub fn parse(arg: &str) -> Result<Override, Vec<Diagnostic>> {
    if let Some(removal) = parse_removal(arg) {
        return removal.map_err(|d| vec![d]);
    }
    let (source, path, key_span, vstart) = split(arg).map_err(|d| vec![d])?;
    let value = node::parse_range(&source, vstart..arg.len())?;
    let value = if vstart == arg.len() { Node { value: Value::Null, span: Span::new(&source, vstart..vstart) } } else { value };
    Ok(Override { path, value, key_span, raw: arg.to_string() })
}

/// Parses one argument of `rlx sweep`: an axis if its value is a list or comma-separated.
pub fn parse_sweep(arg: &str, validator: &Validator) -> Result<SweepArg, Vec<Diagnostic>> {
    if let Some(removal) = parse_removal(arg) {
        return removal.map(SweepArg::Fixed).map_err(|d| vec![d]);
    }
    let (source, path, key_span, vstart) = split(arg).map_err(|d| vec![d])?;
    let pieces = split_top_level_commas(&arg[vstart..]);
    let list_key = {
        let p: Vec<&str> = path.iter().map(String::as_str).collect();
        validator.is_list(&p)
    };
    let values: Vec<Node> = if pieces.len() > 1 {
        // Hydra style: `a,b,c`.
        let mut values = vec![];
        let mut errs = vec![];
        for r in pieces {
            let r = (vstart + r.start)..(vstart + r.end);
            match node::parse_range(&source, r.clone()) {
                Ok(n) if r.is_empty() || n.span.text().trim().is_empty() => {
                    errs.push(Diagnostic::new("empty value in a comma-separated sweep axis", Some(Span::new(&source, r))));
                    let _ = n;
                }
                Ok(n) => values.push(n),
                Err(e) => errs.extend(e),
            }
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        values
    } else {
        let value = node::parse_range(&source, vstart..arg.len())?;
        match value.value {
            Value::Seq(items) if !list_key || items.iter().all(|i| matches!(i.value, Value::Seq(_))) => {
                if items.is_empty() {
                    return Err(vec![Diagnostic::new("a sweep axis needs at least one value", Some(value.span))]);
                }
                items
            }
            _ => {
                let value = if vstart == arg.len() { Node { value: Value::Null, span: Span::new(&source, vstart..vstart) } } else { value };
                return Ok(SweepArg::Fixed(Override { path, value, key_span, raw: arg.to_string() }));
            }
        }
    };
    Ok(SweepArg::Axis(Axis { path, values, key_span, raw: arg.to_string() }))
}

/// Byte ranges of the comma-separated pieces of `s`, ignoring commas inside brackets, braces
/// and quotes. One piece means no top-level comma.
pub(crate) fn split_top_level_commas(s: &str) -> Vec<std::ops::Range<usize>> {
    let mut out = vec![];
    let (mut depth, mut quote, mut start) = (0i32, None::<char>, 0);
    let mut chars = s.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        match quote {
            Some(q) => {
                if c == '\\' && q == '"' {
                    chars.next();
                } else if c == q {
                    quote = None;
                }
            }
            None => match c {
                '"' | '\'' => quote = Some(c),
                '[' | '{' => depth += 1,
                ']' | '}' => depth -= 1,
                ',' if depth == 0 => {
                    out.push(start..i);
                    start = i + 1;
                }
                _ => {}
            },
        }
    }
    out.push(start..s.len());
    out
}

/// Sets the value at `ov.path` in `tree`, creating mappings along the way; removes it for
/// `~PATH`.
///
/// # Errors
/// When a key along the path holds something that is not a mapping (or a list, for an index);
/// `~PATH` of a key that is not there.
pub fn apply(tree: &mut Node, ov: &Override) -> Result<(), Diagnostic> {
    if ov.removes() {
        let segs: Vec<&str> = ov.path.iter().map(String::as_str).collect();
        if tree.remove(&segs) {
            return Ok(());
        }
        return Err(Diagnostic::new(format!("cannot remove `{}`: the spec has no such key", ov.dotted()), Some(ov.key_span.clone()))
            .at(ov.dotted())
            .label("not in the spec"));
    }
    if matches!(tree.value, Value::Null) {
        tree.value = Value::Map(vec![]);
    }
    let mut node = tree;
    for (depth, seg) in ov.path.iter().enumerate() {
        let last = depth + 1 == ov.path.len();
        let here = ov.path[..depth].join(".");
        if matches!(node.value, Value::Null) && !last {
            node.value = Value::Map(vec![]);
        }
        let (kind, at) = (node.kind_name(), node.span.location());
        node = match &mut node.value {
            Value::Map(entries) => {
                let idx = match entries.iter().position(|e| &e.key == seg) {
                    Some(i) => i,
                    None => {
                        entries.push(Entry {
                            key: seg.clone(),
                            key_span: ov.key_span.clone(),
                            value: Node { value: Value::Map(vec![]), span: ov.key_span.clone() },
                        });
                        entries.len() - 1
                    }
                };
                if last {
                    entries[idx].value = ov.value.clone();
                    entries[idx].key_span = ov.key_span.clone();
                    return Ok(());
                }
                &mut entries[idx].value
            }
            Value::Seq(items) => {
                let len = items.len();
                let Some(item) = seg.parse::<usize>().ok().and_then(|i| items.get_mut(i)) else {
                    return Err(Diagnostic::new(format!("`{here}` is a list of {len} item(s); `{seg}` is not an index in it"), Some(ov.key_span.clone()))
                        .at(ov.dotted()));
                };
                if last {
                    *item = ov.value.clone();
                    return Ok(());
                }
                item
            }
            _ => {
                return Err(Diagnostic::new(format!("cannot set `{}`: `{here}` is {kind}, not a mapping", ov.dotted()), Some(ov.key_span.clone()))
                    .at(ov.dotted())
                    .hint(format!("`{here}` is set at {at}")));
            }
        };
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::source::Source;
    use std::path::Path;

    #[test]
    fn aliases_and_yaml_values() {
        let o = parse("lr=4e-5").unwrap();
        assert_eq!(o.dotted(), "optimizer.learning_rate");
        assert!(matches!(o.value.value, Value::Float(f) if f == 4e-5));
        assert_eq!(o.value.span.location(), "command line:1:4");
        let o = parse("sampling.stop=[\"```\", END]").unwrap();
        assert!(matches!(&o.value.value, Value::Seq(v) if v.len() == 2));
        let o = parse("name=").unwrap();
        assert!(matches!(o.value.value, Value::Null));
    }

    #[test]
    fn bad_keys_are_rejected() {
        assert!(parse("=3").is_err());
        assert!(parse("a..b=3").is_err());
        assert!(parse("a b=3").is_err());
        assert!(parse("noequals").is_err());
    }

    #[test]
    fn apply_creates_and_replaces() {
        let src = Source::file(Path::new("s.yaml"), "a: {b: 1}\nl: [x, y]\ns: 3\n".into());
        let mut tree = node::parse(&src).unwrap();
        apply(&mut tree, &parse("a.b=2").unwrap()).unwrap();
        apply(&mut tree, &parse("a.c.d=true").unwrap()).unwrap();
        apply(&mut tree, &parse("l.1=z").unwrap()).unwrap();
        assert!(matches!(tree.get(&["a", "b"]).unwrap().value, Value::Int(2)));
        assert!(matches!(tree.get(&["a", "c", "d"]).unwrap().value, Value::Bool(true)));
        assert!(matches!(&tree.get(&["l", "1"]).unwrap().value, Value::Str(s) if s == "z"));
        assert_eq!(tree.get(&["a", "b"]).unwrap().span.source.name, "command line");
        let err = apply(&mut tree, &parse("s.x=1").unwrap()).unwrap_err();
        assert!(err.message.contains("`s` is an integer, not a mapping"), "{}", err.message);
        assert!(apply(&mut tree, &parse("l.5=1").unwrap()).is_err());
    }

    #[test]
    fn a_tilde_removes_a_key() {
        let src = Source::file(Path::new("s.yaml"), "backend: {kind: local, threads: 2}\n".into());
        let mut tree = node::parse(&src).unwrap();
        let ov = parse("~backend.threads").unwrap();
        assert_eq!((ov.dotted(), ov.canonical()), ("backend.threads".to_string(), "~backend.threads".to_string()));
        apply(&mut tree, &ov).unwrap();
        assert!(tree.get(&["backend", "threads"]).is_none() && tree.get(&["backend", "kind"]).is_some());
        let err = apply(&mut tree, &ov).unwrap_err();
        assert_eq!(err.message, "cannot remove `backend.threads`: the spec has no such key");
        assert_eq!(err.span.unwrap().location(), "command line:1:2");
        assert!(parse("~a..b").is_err());
        assert!(looks_like_override("~backend.threads") && !looks_like_override("~/specs/a.yaml"));
        assert!(matches!(parse_sweep("~backend.threads", &Validator::new()).unwrap(), SweepArg::Fixed(o) if o.removes()));
    }

    #[test]
    fn sweep_axes() {
        let v = Validator::new();
        let SweepArg::Axis(a) = parse_sweep("lr=[1e-5,4e-5]", &v).unwrap() else { panic!() };
        assert_eq!(a.dotted(), "optimizer.learning_rate");
        assert_eq!(a.values.len(), 2);
        let SweepArg::Axis(a) = parse_sweep("seed=0,1,2", &v).unwrap() else { panic!() };
        assert!(a.is_replicate());
        assert_eq!(a.values.len(), 3);
        assert_eq!(a.values[2].span.location(), "command line:1:10");
        // A list-valued key: a flat list is one value, a list of lists an axis.
        assert!(matches!(parse_sweep("eval.k=[1,5]", &v).unwrap(), SweepArg::Fixed(_)));
        let SweepArg::Axis(a) = parse_sweep("eval.k=[1],[1,5]", &v).unwrap() else { panic!() };
        assert_eq!(a.values.len(), 2);
        let SweepArg::Axis(a) = parse_sweep("sampling.stop=[[a],[b, c]]", &v).unwrap() else { panic!() };
        assert_eq!(a.values.len(), 2);
        assert!(matches!(parse_sweep("group_size=8", &v).unwrap(), SweepArg::Fixed(_)));
        assert!(matches!(parse_sweep("name='a,b'", &v).unwrap(), SweepArg::Fixed(_)));
        assert!(parse_sweep("lr=[]", &v).is_err());
        assert!(parse_sweep("lr=1,,2", &v).is_err());
    }
}
