//! YAML text → a value tree in which every node and key remembers its [`Span`].
//!
//! Why our own tree over `saphyr-parser` events rather than deserialising straight into the spec
//! types: serde stops at the first error, and we want every problem in a file at once, pointing
//! at file:line:column, also for values that came from command-line overrides. The tree is what
//! overrides edit, what the schema validator walks, and what semantic checks ask for locations.
//!
//! Why `saphyr-parser`: `serde_yaml` is deprecated upstream and `serde_yml` is unsound and
//! archived; saphyr is the maintained, YAML 1.2-compliant, pure-Rust parser whose event stream
//! carries source markers for every scalar and collection.
//!
//! Plain scalars are typed with the YAML 1.2 core schema (`yes`/`no` stay strings, `1e-5` is a
//! float); quoted scalars are always strings. Anchors, aliases and `<<` merge keys are supported.
//! Duplicate keys are an error rather than last-one-wins, since that silently drops a value.
//!
//! Aliases are expanded as they are read (the schema check and overrides walk a plain tree), so
//! a few hundred bytes of nested anchors (a "billion laughs") would become gigabytes before
//! any check could refuse them. The parse counts the values of the tree it builds, aliases
//! counted at their expanded size before they are copied, and stops at [`MAX_NODES`], pointing
//! at the value or alias that crosses it. Refusing aliases outright was the alternative; specs use
//! them for shared settings (`<<: *defaults`), which stay far below the limit.

use std::collections::HashMap;
use std::sync::Arc;

use saphyr_parser::{Event, Parser, ScalarStyle};

use super::diagnostic::Diagnostic;
use super::source::{Source, Span};

/// The most values (scalars, keys, lists and mappings, aliases counted as what they expand to)
/// one parse builds: 100,000. A real spec has a few hundred; each value costs about 100 bytes
/// here and several times that in the copies checking makes, so this bounds a spec's tree at tens
/// of megabytes, whatever its aliases do.
pub const MAX_NODES: usize = 100_000;

/// A YAML value.
#[derive(Debug, Clone)]
pub enum Value {
    /// `null`, `~` or nothing.
    Null,
    /// `true` / `false`.
    Bool(bool),
    /// An integer.
    Int(i64),
    /// A floating-point number.
    Float(f64),
    /// A string.
    Str(String),
    /// A sequence.
    Seq(Vec<Node>),
    /// A mapping, in source order.
    Map(Vec<Entry>),
}

/// A key and its value in a mapping.
#[derive(Debug, Clone)]
pub struct Entry {
    /// The key (non-string keys are kept as their text).
    pub key: String,
    /// Where the key is written.
    pub key_span: Span,
    /// The value.
    pub value: Node,
}

/// A value and where it was written.
#[derive(Debug, Clone)]
pub struct Node {
    /// The value.
    pub value: Value,
    /// Its location.
    pub span: Span,
}

impl Node {
    /// Short description of the value's type for "expected X, found Y" messages.
    pub fn kind_name(&self) -> &'static str {
        match &self.value {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Int(_) => "an integer",
            Value::Float(_) => "a number",
            Value::Str(_) => "a string",
            Value::Seq(_) => "a list",
            Value::Map(_) => "a mapping",
        }
    }

    /// The entry for `key`, if this is a mapping that has it.
    pub fn entry(&self, key: &str) -> Option<&Entry> {
        match &self.value {
            Value::Map(entries) => entries.iter().find(|e| e.key == key),
            _ => None,
        }
    }

    /// The node at a dotted path of mapping keys and sequence indices.
    pub fn get(&self, path: &[&str]) -> Option<&Node> {
        let mut node = self;
        for seg in path {
            node = match &node.value {
                Value::Map(entries) => &entries.iter().find(|e| e.key == *seg)?.value,
                Value::Seq(items) => items.get(seg.parse::<usize>().ok()?)?,
                _ => return None,
            };
        }
        Some(node)
    }

    /// An error about the value at the dotted `key` (`stages.0.train`), located there (or at its
    /// closest ancestor, as [`Node::span_of`]) and naming the key.
    pub fn error_at(&self, key: &str, message: impl Into<String>) -> Diagnostic {
        let segs: Vec<&str> = key.split('.').collect();
        Diagnostic::new(message, Some(self.span_of(&segs))).at(key)
    }

    /// The span of the deepest node that exists along `path`: the value itself if present,
    /// else the closest ancestor (for a value that comes from a default).
    pub fn span_of(&self, path: &[&str]) -> Span {
        let mut node = self;
        for seg in path {
            let next = match &node.value {
                Value::Map(entries) => entries.iter().find(|e| e.key == *seg).map(|e| &e.value),
                Value::Seq(items) => seg.parse::<usize>().ok().and_then(|i| items.get(i)),
                _ => None,
            };
            match next {
                Some(n) => node = n,
                None => break,
            }
        }
        node.span.clone()
    }

    /// Removes the value at `path` (a mapping entry or a list item); returns whether it existed.
    pub fn remove(&mut self, path: &[&str]) -> bool {
        let Some((last, parents)) = path.split_last() else { return false };
        let mut node = self;
        for seg in parents {
            node = match &mut node.value {
                Value::Map(entries) => match entries.iter_mut().find(|e| e.key == *seg) {
                    Some(e) => &mut e.value,
                    None => return false,
                },
                Value::Seq(items) => match seg.parse::<usize>().ok().and_then(|i| items.get_mut(i)) {
                    Some(n) => n,
                    None => return false,
                },
                _ => return false,
            };
        }
        match &mut node.value {
            Value::Map(entries) => {
                let before = entries.len();
                entries.retain(|e| e.key != *last);
                entries.len() != before
            }
            Value::Seq(items) => match last.parse::<usize>() {
                Ok(i) if i < items.len() => {
                    items.remove(i);
                    true
                }
                _ => false,
            },
            _ => false,
        }
    }

    /// Converts to JSON. Non-finite floats become `null`; the schema validator rejects them
    /// before this is called on a spec.
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value as J;
        match &self.value {
            Value::Null => J::Null,
            Value::Bool(b) => J::Bool(*b),
            Value::Int(i) => J::from(*i),
            Value::Float(f) => serde_json::Number::from_f64(*f).map_or(J::Null, J::Number),
            Value::Str(s) => J::String(s.clone()),
            Value::Seq(items) => J::Array(items.iter().map(Node::to_json).collect()),
            Value::Map(entries) => {
                J::Object(entries.iter().map(|e| (e.key.clone(), e.value.to_json())).collect())
            }
        }
    }
}

/// Parses a whole source text as one YAML document.
pub fn parse(source: &Arc<Source>) -> Result<Node, Vec<Diagnostic>> {
    parse_range(source, 0..source.text.len())
}

/// Parses `source.text[range]` as one YAML document, with spans relative to the whole text.
/// Used for the value part of a `key=value` override and the items of a sweep axis.
pub fn parse_range(source: &Arc<Source>, range: std::ops::Range<usize>) -> Result<Node, Vec<Diagnostic>> {
    let start = range.start;
    let text = &source.text[range];
    let mut b = Builder {
        source,
        offsets: char_offsets(text, start),
        stack: vec![],
        anchors: HashMap::new(),
        root: None,
        docs: 0,
        nodes: 0,
        diags: vec![],
    };
    for item in Parser::new_from_str(text) {
        match item {
            Ok((event, span)) => {
                let range = b.byte(span.start.index())..b.byte(span.end.index());
                if let Err(over) = b.event(event, range) {
                    return Err(vec![*over]);
                }
            }
            Err(e) => {
                let at = b.byte(e.marker().index());
                let end = (at + 1).min(source.text.len()).max(at);
                b.diags.push(
                    Diagnostic::new(format!("invalid YAML: {}", e.info()), Some(Span::new(source, at..end)))
                        .label("here"),
                );
                return Err(b.diags);
            }
        }
    }
    if !b.diags.is_empty() {
        return Err(b.diags);
    }
    Ok(b.root.unwrap_or_else(|| Node { value: Value::Null, span: Span::new(source, start..start) }))
}

/// Byte offset of each character index (plus one past the end), shifted by `base`.
fn char_offsets(text: &str, base: usize) -> Vec<usize> {
    text.char_indices().map(|(i, _)| base + i).chain(std::iter::once(base + text.len())).collect()
}

/// A collection being read; `counted` is the builder's value count when it started, so its own
/// size (for an anchor on it) is the difference at its end.
enum Frame {
    Seq { items: Vec<Node>, start: usize, anchor: usize, counted: usize },
    Map { entries: Vec<Entry>, key: Option<(String, Span)>, start: usize, anchor: usize, counted: usize },
}

struct Builder<'a> {
    source: &'a Arc<Source>,
    offsets: Vec<usize>,
    stack: Vec<Frame>,
    /// Each anchored node with the number of values it holds (itself included).
    anchors: HashMap<usize, (Node, usize)>,
    root: Option<Node>,
    docs: usize,
    /// Values built so far, aliases counted expanded (see [`MAX_NODES`]).
    nodes: usize,
    diags: Vec<Diagnostic>,
}

/// The parse stops at once: the tree would grow past [`MAX_NODES`].
type OverBudget = Box<Diagnostic>;

impl Builder<'_> {
    fn byte(&self, char_index: usize) -> usize {
        self.offsets.get(char_index).copied().unwrap_or_else(|| *self.offsets.last().unwrap_or(&0))
    }

    fn span(&self, range: std::ops::Range<usize>) -> Span {
        Span::new(self.source, range)
    }

    /// Counts `n` more values; past [`MAX_NODES`], the error that stops the parse, at `range`.
    fn count(&mut self, n: usize, range: &std::ops::Range<usize>, alias: bool) -> Result<(), OverBudget> {
        self.nodes = self.nodes.saturating_add(n);
        if self.nodes <= MAX_NODES {
            return Ok(());
        }
        let (message, label) = if alias {
            (format!("this alias expands the spec past {MAX_NODES} values, the most a spec may hold"), format!("expands to {n} values"))
        } else {
            (format!("the spec holds more than {MAX_NODES} values, the most a spec may hold"), "the limit is reached here".to_string())
        };
        let end = range.end.max(range.start);
        Err(Box::new(
            Diagnostic::new(message, Some(self.span(range.start..end)))
                .label(label)
                .hint("a spec's aliases and lists must stay small: put large data in a data file (`data.train`), not in the spec"),
        ))
    }

    fn event(&mut self, event: Event<'_>, range: std::ops::Range<usize>) -> Result<(), OverBudget> {
        match event {
            Event::Scalar(..) | Event::SequenceStart(..) | Event::MappingStart(..) => self.count(1, &range, false)?,
            Event::Alias(id) => {
                let size = self.anchors.get(&id).map_or(0, |(_, size)| *size);
                self.count(size, &range, true)?;
            }
            _ => {}
        }
        match event {
            Event::DocumentStart(_) => {
                self.docs += 1;
                if self.docs > 1 {
                    self.diags.push(
                        Diagnostic::new("a spec holds one YAML document, found a second", Some(self.span(range)))
                            .label("second document starts here"),
                    );
                }
            }
            Event::Scalar(text, style, anchor, tag) => {
                let span = self.span(range);
                let tag_suffix = tag.as_ref().map(|t| t.suffix.clone());
                let value = resolve_scalar(&text, style, tag_suffix.as_deref());
                // A scalar in key position stays text, whatever it looks like.
                if let Some(Frame::Map { key: key @ None, .. }) = self.stack.last_mut() {
                    *key = Some((text.into_owned(), span));
                    return Ok(());
                }
                let node = Node { value, span };
                if anchor > 0 {
                    self.anchors.insert(anchor, (node.clone(), 1));
                }
                self.push(node);
            }
            Event::Alias(id) => {
                let span = self.span(range);
                match self.anchors.get(&id).map(|(node, _)| node.clone()) {
                    Some(node) => self.push_or_key(node, span),
                    None => self.diags.push(Diagnostic::new("alias to an unknown anchor", Some(span))),
                }
            }
            Event::SequenceStart(anchor, _) => {
                if self.key_expected() {
                    self.complex_key(range.clone());
                }
                let counted = self.nodes - 1;
                self.stack.push(Frame::Seq { items: vec![], start: range.start, anchor, counted });
            }
            Event::MappingStart(anchor, _) => {
                if self.key_expected() {
                    self.complex_key(range.clone());
                }
                let counted = self.nodes - 1;
                self.stack.push(Frame::Map { entries: vec![], key: None, start: range.start, anchor, counted });
            }
            Event::SequenceEnd => {
                if let Some(Frame::Seq { items, start, anchor, counted }) = self.stack.pop() {
                    let end = range.end.max(start);
                    let node = Node { value: Value::Seq(items), span: self.span(start..end) };
                    self.finish_collection(node, anchor, self.nodes - counted);
                }
            }
            Event::MappingEnd => {
                if let Some(Frame::Map { entries, start, anchor, counted, .. }) = self.stack.pop() {
                    let end = range.end.max(start);
                    let entries = self.merge_keys(entries);
                    let node = Node { value: Value::Map(entries), span: self.span(start..end) };
                    self.finish_collection(node, anchor, self.nodes - counted);
                }
            }
            Event::StreamStart | Event::StreamEnd | Event::DocumentEnd | Event::Nothing => {}
        }
        Ok(())
    }

    fn key_expected(&self) -> bool {
        matches!(self.stack.last(), Some(Frame::Map { key: None, .. }))
    }

    fn complex_key(&mut self, range: std::ops::Range<usize>) {
        let span = self.span(range);
        self.diags.push(Diagnostic::new("mapping keys must be plain text, not lists or mappings", Some(span)));
    }

    fn finish_collection(&mut self, node: Node, anchor: usize, size: usize) {
        if anchor > 0 {
            self.anchors.insert(anchor, (node.clone(), size));
        }
        // A collection that was a (rejected) complex key leaves the parent awaiting a key; give it
        // a placeholder so the parse can go on and report later problems too.
        if self.key_expected() {
            let span = node.span.clone();
            if let Some(Frame::Map { key, .. }) = self.stack.last_mut() {
                *key = Some(("<complex key>".into(), span));
            }
            return;
        }
        self.push(node);
    }

    fn push_or_key(&mut self, node: Node, span: Span) {
        if let Some(Frame::Map { key: key @ None, .. }) = self.stack.last_mut() {
            let text = match &node.value {
                Value::Str(s) => s.clone(),
                _ => span.text().to_string(),
            };
            *key = Some((text, span));
            return;
        }
        self.push(node);
    }

    fn push(&mut self, node: Node) {
        match self.stack.last_mut() {
            None => self.root = Some(node),
            Some(Frame::Seq { items, .. }) => items.push(node),
            Some(Frame::Map { entries, key, .. }) => {
                let (k, key_span) = key.take().expect("a value follows a key");
                if let Some(first) = entries.iter().find(|e| e.key == k) {
                    let first_at = first.key_span.location();
                    self.diags.push(
                        Diagnostic::new(format!("duplicate key `{k}`"), Some(key_span))
                            .label("defined again here")
                            .hint(format!("`{k}` is first defined at {first_at}; keep one of them")),
                    );
                    return;
                }
                entries.push(Entry { key: k, key_span, value: node });
            }
        }
    }

    /// Applies YAML merge keys (`<<: *defaults`): merged entries fill in keys not written
    /// explicitly in the mapping.
    fn merge_keys(&mut self, entries: Vec<Entry>) -> Vec<Entry> {
        if !entries.iter().any(|e| e.key == "<<") {
            return entries;
        }
        let (merges, mut own): (Vec<Entry>, Vec<Entry>) = entries.into_iter().partition(|e| e.key == "<<");
        for m in merges {
            let sources: Vec<Node> = match m.value.value {
                Value::Map(_) => vec![m.value],
                Value::Seq(items) => items,
                _ => {
                    self.diags.push(Diagnostic::new("`<<` merges a mapping or a list of mappings", Some(m.value.span)));
                    continue;
                }
            };
            for src in sources {
                match src.value {
                    Value::Map(src_entries) => {
                        for e in src_entries {
                            if !own.iter().any(|o| o.key == e.key) {
                                own.push(e);
                            }
                        }
                    }
                    _ => self.diags.push(Diagnostic::new("`<<` merges a mapping or a list of mappings", Some(src.span))),
                }
            }
        }
        own
    }
}

/// Types a scalar: quoted or `!!str` → string; plain → the YAML 1.2 core schema.
fn resolve_scalar(text: &str, style: ScalarStyle, tag_suffix: Option<&str>) -> Value {
    match tag_suffix {
        Some("str") => return Value::Str(text.to_string()),
        Some("int") => {
            if let Some(i) = parse_int(text) {
                return Value::Int(i);
            }
        }
        Some("float") => {
            if let Some(f) = parse_float(text).or_else(|| parse_int(text).map(|i| i as f64)) {
                return Value::Float(f);
            }
        }
        _ => {}
    }
    if style != ScalarStyle::Plain {
        return Value::Str(text.to_string());
    }
    resolve_plain(text)
}

/// The YAML 1.2 core schema for plain scalars.
pub fn resolve_plain(text: &str) -> Value {
    match text {
        "" | "~" | "null" | "Null" | "NULL" => return Value::Null,
        "true" | "True" | "TRUE" => return Value::Bool(true),
        "false" | "False" | "FALSE" => return Value::Bool(false),
        _ => {}
    }
    if let Some(i) = parse_int(text) {
        return Value::Int(i);
    }
    if let Some(f) = parse_float(text) {
        return Value::Float(f);
    }
    Value::Str(text.to_string())
}

fn parse_int(t: &str) -> Option<i64> {
    if let Some(h) = t.strip_prefix("0x") {
        return (!h.is_empty() && h.bytes().all(|b| b.is_ascii_hexdigit())).then(|| i64::from_str_radix(h, 16).ok())?;
    }
    if let Some(o) = t.strip_prefix("0o") {
        return (!o.is_empty() && o.bytes().all(|b| (b'0'..=b'7').contains(&b))).then(|| i64::from_str_radix(o, 8).ok())?;
    }
    let digits = t.strip_prefix(['-', '+']).unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    t.parse().ok()
}

fn parse_float(t: &str) -> Option<f64> {
    let unsigned = t.strip_prefix(['-', '+']).unwrap_or(t);
    match unsigned {
        ".inf" | ".Inf" | ".INF" => return Some(if t.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY }),
        ".nan" | ".NaN" | ".NAN" if unsigned.len() == t.len() => return Some(f64::NAN),
        _ => {}
    }
    // [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
    let (mantissa, exp) = match unsigned.find(['e', 'E']) {
        Some(i) => (&unsigned[..i], Some(&unsigned[i + 1..])),
        None => (unsigned, None),
    };
    let mantissa_ok = match mantissa.split_once('.') {
        Some((a, b)) => {
            a.bytes().all(|c| c.is_ascii_digit()) && b.bytes().all(|c| c.is_ascii_digit()) && !(a.is_empty() && b.is_empty())
        }
        None => !mantissa.is_empty() && mantissa.bytes().all(|c| c.is_ascii_digit()),
    };
    let exp_ok = exp.is_none_or(|e| {
        let d = e.strip_prefix(['-', '+']).unwrap_or(e);
        !d.is_empty() && d.bytes().all(|c| c.is_ascii_digit())
    });
    if mantissa_ok && exp_ok { t.parse().ok() } else { None }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn parse_str(s: &str) -> Result<Node, Vec<Diagnostic>> {
        parse(&Source::file(Path::new("t.yaml"), s.to_string()))
    }

    #[test]
    fn core_schema_typing() {
        assert!(matches!(resolve_plain("1e-5"), Value::Float(f) if f == 1e-5));
        assert!(matches!(resolve_plain("4e-5"), Value::Float(_)));
        assert!(matches!(resolve_plain("-3"), Value::Int(-3)));
        assert!(matches!(resolve_plain("0x1f"), Value::Int(31)));
        assert!(matches!(resolve_plain("1.5"), Value::Float(_)));
        assert!(matches!(resolve_plain(".5"), Value::Float(_)));
        assert!(matches!(resolve_plain("yes"), Value::Str(_)));
        assert!(matches!(resolve_plain("1.2.3"), Value::Str(_)));
        assert!(matches!(resolve_plain("e5"), Value::Str(_)));
        assert!(matches!(resolve_plain("~"), Value::Null));
        assert!(matches!(resolve_plain("-.inf"), Value::Float(f) if f == f64::NEG_INFINITY));
    }

    #[test]
    fn spans_point_at_values_and_keys() {
        let n = parse_str("a:\n  b: 12\n  c: [x, 'y']\n").unwrap();
        let b = n.get(&["a", "b"]).unwrap();
        assert!(matches!(b.value, Value::Int(12)));
        assert_eq!(b.span.location(), "t.yaml:2:6");
        let e = n.get(&["a"]).unwrap().entry("c").unwrap();
        assert_eq!(e.key_span.location(), "t.yaml:3:3");
        assert!(matches!(n.get(&["a", "c", "1"]).unwrap().value, Value::Str(ref s) if s == "y"));
        // A missing key falls back to the closest existing ancestor.
        assert_eq!(n.span_of(&["a", "zzz"]).location(), "t.yaml:2:3");
    }

    #[test]
    fn duplicate_keys_are_errors() {
        let errs = parse_str("a: 1\nb: 2\na: 3\n").unwrap_err();
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains("duplicate key `a`"));
        assert_eq!(errs[0].span.as_ref().unwrap().location(), "t.yaml:3:1");
    }

    #[test]
    fn anchors_aliases_and_merge_keys() {
        let n = parse_str("base: &b {x: 1, y: 2}\nother:\n  <<: *b\n  y: 3\nz: *b\n").unwrap();
        assert!(matches!(n.get(&["other", "x"]).unwrap().value, Value::Int(1)));
        assert!(matches!(n.get(&["other", "y"]).unwrap().value, Value::Int(3)));
        assert!(matches!(n.get(&["z", "y"]).unwrap().value, Value::Int(2)));
    }

    #[test]
    fn an_alias_bomb_stops_at_the_alias_that_crosses_the_limit() {
        // Nine aliases of the level above per level: 9^7 leaves if expanded.
        let mut text = String::from("a: &a [x, x, x, x, x, x, x, x, x]\n");
        for (prev, name) in ["a", "b", "c", "d", "e", "f"].iter().zip(["b", "c", "d", "e", "f", "g"]) {
            let refs = vec![format!("*{prev}"); 9].join(", ");
            text.push_str(&format!("{name}: &{name} [{refs}]\n"));
        }
        let errs = parse_str(&text).unwrap_err();
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains("alias expands the spec past 100000 values"), "{}", errs[0].message);
        // `e` holds 66,430 values: the first alias of it on line 6 crosses the limit.
        assert!(errs[0].span.as_ref().unwrap().location().starts_with("t.yaml:6:"), "{:?}", errs[0].span);
        // The levels below the limit parse, aliases expanded.
        let small: String = text.lines().take(3).map(|l| format!("{l}\n")).collect();
        let n = parse_str(&small).unwrap();
        assert!(matches!(n.get(&["c", "8", "8", "8"]).unwrap().value, Value::Str(ref s) if s == "x"));
    }

    #[test]
    fn a_spec_of_too_many_values_is_refused_without_aliases() {
        let text = format!("stop: [{}]\n", vec!["s"; MAX_NODES].join(", "));
        let errs = parse_str(&text).unwrap_err();
        assert!(errs[0].message.contains("holds more than 100000 values"), "{}", errs[0].message);
        let fits = format!("stop: [{}]\n", vec!["s"; MAX_NODES - 3].join(", "));
        assert!(parse_str(&fits).is_ok());
    }

    #[test]
    fn syntax_errors_have_locations() {
        let errs = parse_str("a: [1, 2\nb: 3\n").unwrap_err();
        assert!(errs[0].message.starts_with("invalid YAML"));
        assert!(errs[0].span.is_some());
    }

    #[test]
    fn empty_document_is_null() {
        assert!(matches!(parse_str("").unwrap().value, Value::Null));
        assert!(matches!(parse_str("# only a comment\n").unwrap().value, Value::Null));
    }
}
