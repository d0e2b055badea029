//! The JSON Schema of specs, generated from [`super::types`], and a validator that walks the
//! located YAML tree against it.
//!
//! Why validate the tree ourselves rather than with serde or a generic JSON Schema crate: serde
//! stops at the first error, and a generic validator reports JSON pointers and vague `oneOf`
//! failures. Walking our own tree against our own (small, known) schema dialect gives every error
//! in a file at once, each with file:line:column, the key path, what was expected, and a "did you
//! mean". The schema is what schemars emits for our types: `type`, `properties`,
//! `additionalProperties`, `required`, `oneOf` of constants (plain enums) or of objects tagged by
//! `kind` (tagged enums), `items`, numeric bounds and integer formats, `$ref` into `$defs`.

use serde_json::Value as J;

use super::diagnostic::{Diagnostic, did_you_mean};
use super::node::{Node, Value};

/// The JSON Schema of experiment specs, as `rlx schema` prints it.
pub fn json_schema() -> J {
    serde_json::to_value(schemars::schema_for!(super::Spec)).expect("the spec schema serialises")
}

/// Short names users may write instead of a full key path, on the command line and as
/// "did you mean" hints.
pub const ALIASES: &[(&str, &str)] = &[
    ("lr", "optimizer.learning_rate"),
    ("learning_rate", "optimizer.learning_rate"),
    ("steps", "schedule.max_steps"),
    ("max_steps", "schedule.max_steps"),
    ("group_size", "grpo.group_size"),
    ("prompts_per_step", "grpo.prompts_per_step"),
    ("seed", "seed"),
    ("temperature", "sampling.temperature"),
    ("max_tokens", "sampling.max_tokens"),
    ("eval_every", "schedule.eval_every"),
    ("save_every", "schedule.save_every"),
    ("lora_rank", "model.lora.rank"),
];

/// Expands an alias (`lr`) to its key path; other paths are returned as given.
pub fn expand_alias(path: &str) -> &str {
    ALIASES.iter().find(|(a, _)| *a == path).map_or(path, |(_, full)| full)
}

/// Validates located YAML trees against the spec schema.
pub struct Validator {
    root: J,
}

impl Default for Validator {
    fn default() -> Self {
        Self::new()
    }
}

impl Validator {
    /// A validator for the spec schema.
    pub fn new() -> Self {
        Validator { root: json_schema() }
    }

    /// Every schema problem in `node`, in document order.
    pub fn validate(&self, node: &Node) -> Vec<Diagnostic> {
        let mut out = vec![];
        self.check(&self.root, node, &mut vec![], &mut out);
        out
    }

    /// The schema of the value at a key path (numeric segments index lists), if the path exists.
    pub fn schema_at(&self, path: &[&str]) -> Option<&J> {
        let mut schema = self.resolve(&self.root);
        for seg in path {
            schema = if let Some(items) = schema.get("items") {
                seg.parse::<usize>().ok()?;
                self.resolve(items)
            } else {
                self.resolve(self.property(schema, seg)?)
            };
        }
        Some(schema)
    }

    /// Whether the value at `path` is a list (so `key=[a,b]` is one value, not a sweep axis).
    pub fn is_list(&self, path: &[&str]) -> bool {
        self.schema_at(path).is_some_and(|s| self.types(s).contains(&"array"))
    }

    /// Property `name` of an object schema, looking through tagged variants.
    fn property<'a>(&'a self, schema: &'a J, name: &str) -> Option<&'a J> {
        if let Some(p) = schema.get("properties").and_then(|p| p.get(name)) {
            return Some(p);
        }
        let alts = schema.get("oneOf").or_else(|| schema.get("anyOf"))?.as_array()?;
        alts.iter().find_map(|a| self.property(self.resolve(a), name))
    }

    fn resolve<'a>(&'a self, mut schema: &'a J) -> &'a J {
        while let Some(r) = schema.get("$ref").and_then(J::as_str) {
            let name = r.trim_start_matches("#/$defs/");
            match self.root.get("$defs").and_then(|d| d.get(name)) {
                Some(s) => schema = s,
                None => break,
            }
        }
        schema
    }

    fn types<'a>(&'a self, schema: &'a J) -> Vec<&'a str> {
        let schema = self.resolve(schema);
        match schema.get("type") {
            Some(J::String(t)) => vec![t.as_str()],
            Some(J::Array(ts)) => ts.iter().filter_map(J::as_str).collect(),
            _ => match schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(J::as_array) {
                Some(alts) => alts.iter().flat_map(|a| self.types(a)).collect(),
                None => vec![],
            },
        }
    }

    /// Every field path in the schema, for "`temperature` belongs in `sampling`" hints.
    fn field_paths(&self) -> Vec<String> {
        let mut out = vec![];
        self.collect_paths(&self.root, String::new(), &mut out, 0);
        out
    }

    fn collect_paths(&self, schema: &J, prefix: String, out: &mut Vec<String>, depth: usize) {
        let schema = self.resolve(schema);
        if depth > 6 {
            return;
        }
        if let Some(props) = schema.get("properties").and_then(J::as_object) {
            for (k, v) in props {
                let p = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                out.push(p.clone());
                self.collect_paths(v, p, out, depth + 1);
            }
        }
        if let Some(items) = schema.get("items") {
            self.collect_paths(items, format!("{prefix}[]"), out, depth + 1);
        }
        for key in ["oneOf", "anyOf"] {
            for a in schema.get(key).and_then(J::as_array).into_iter().flatten() {
                self.collect_paths(a, prefix.clone(), out, depth + 1);
            }
        }
    }

    fn check(&self, schema: &J, node: &Node, path: &mut Vec<String>, out: &mut Vec<Diagnostic>) {
        let schema = self.resolve(schema);
        if schema == &J::Bool(true) {
            return;
        }
        if let Value::Float(f) = node.value
            && !f.is_finite()
        {
            out.push(self.diag(format!("`{}` must be a finite number, found `{f}`", show(path)), node, path));
            return;
        }
        if let Some(alts) = schema.get("oneOf").or_else(|| schema.get("anyOf")).and_then(J::as_array) {
            self.check_alternatives(alts, node, path, out);
            return;
        }
        if let Some(allowed) = schema.get("enum").and_then(J::as_array) {
            let consts: Vec<&J> = allowed.iter().collect();
            self.check_consts(&consts, node, path, out);
            return;
        }
        let types = self.types(schema);
        if !types.is_empty() && !types.iter().any(|t| type_matches(t, node)) {
            let expected = types.iter().filter(|t| **t != "null").map(|t| type_name(t)).collect::<Vec<_>>().join(" or ");
            let mut d = self
                .diag(format!("`{}` must be {expected}, found {} `{}`", show(path), node.kind_name(), excerpt(node)), node, path)
                .label(format!("expected {expected}"));
            d = d.maybe_hint(type_hint(&types, node));
            out.push(d);
            return;
        }
        match &node.value {
            Value::Int(_) | Value::Float(_) => self.check_number(schema, node, path, out),
            Value::Str(s) => {
                if let Some(min) = schema.get("minLength").and_then(J::as_u64)
                    && (s.chars().count() as u64) < min
                {
                    out.push(self.diag(format!("`{}` must not be empty", show(path)), node, path));
                }
            }
            Value::Seq(items) => {
                if let Some(min) = schema.get("minItems").and_then(J::as_u64)
                    && (items.len() as u64) < min
                {
                    out.push(
                        self.diag(format!("`{}` needs at least {min} item(s), found {}", show(path), items.len()), node, path),
                    );
                }
                if let Some(item_schema) = schema.get("items") {
                    for (i, item) in items.iter().enumerate() {
                        path.push(i.to_string());
                        self.check(item_schema, item, path, out);
                        path.pop();
                    }
                }
            }
            Value::Map(entries) => self.check_object(schema, node, entries, path, out),
            Value::Null | Value::Bool(_) => {}
        }
    }

    fn check_number(&self, schema: &J, node: &Node, path: &[String], out: &mut Vec<Diagnostic>) {
        let x = match node.value {
            Value::Int(i) => i as f64,
            Value::Float(f) => f,
            _ => return,
        };
        let format_max = match schema.get("format").and_then(J::as_str) {
            Some("uint8") => Some(u8::MAX as f64),
            Some("uint16") => Some(u16::MAX as f64),
            Some("uint32") => Some(u32::MAX as f64),
            Some("int32") => Some(i32::MAX as f64),
            _ => None,
        };
        let bound = |key: &str| schema.get(key).and_then(J::as_f64);
        let mut fail = |rule: String| {
            out.push(self.diag(format!("`{}` must be {rule}, found `{}`", show(path), excerpt(node)), node, path).label(format!("must be {rule}")));
        };
        if let Some(m) = bound("minimum")
            && x < m
        {
            fail(format!("≥ {}", num(m)));
        } else if let Some(m) = bound("exclusiveMinimum")
            && x <= m
        {
            fail(format!("> {}", num(m)));
        } else if let Some(m) = bound("maximum")
            && x > m
        {
            fail(format!("≤ {}", num(m)));
        } else if let Some(m) = bound("exclusiveMaximum")
            && x >= m
        {
            fail(format!("< {}", num(m)));
        } else if let Some(m) = format_max
            && x > m
        {
            fail(format!("≤ {}", num(m)));
        }
    }

    fn check_object(&self, schema: &J, node: &Node, entries: &[super::node::Entry], path: &mut Vec<String>, out: &mut Vec<Diagnostic>) {
        let props = schema.get("properties").and_then(J::as_object);
        let additional = schema.get("additionalProperties");
        for e in entries {
            if let Some(p) = props.and_then(|p| p.get(&e.key)) {
                path.push(e.key.clone());
                self.check(p, &e.value, path, out);
                path.pop();
                continue;
            }
            match additional {
                Some(J::Bool(false)) => out.push(self.unknown_field(&e.key, e, props, path)),
                Some(s) => {
                    path.push(e.key.clone());
                    self.check(s, &e.value, path, out);
                    path.pop();
                }
                None => {}
            }
        }
        for req in schema.get("required").and_then(J::as_array).into_iter().flatten().filter_map(J::as_str) {
            if entries.iter().any(|e| e.key == req) {
                continue;
            }
            let mut full = path.clone();
            full.push(req.to_string());
            let what = props
                .and_then(|p| p.get(req))
                .and_then(|p| self.resolve(p).get("description").or_else(|| p.get("description")))
                .and_then(J::as_str)
                .map(first_sentence);
            let where_ = if path.is_empty() { "the spec".to_string() } else { format!("`{}`", show(path)) };
            let mut d = Diagnostic::new(format!("missing field `{req}` in {where_}"), Some(node.span.clone()))
                .at(show(&full))
                .label(format!("`{req}` is required here"));
            if let Some(w) = what {
                d = d.hint(format!("`{}`: {w}", show(&full)));
            }
            out.push(d);
        }
    }

    fn unknown_field(&self, key: &str, e: &super::node::Entry, props: Option<&serde_json::Map<String, J>>, path: &[String]) -> Diagnostic {
        let section = if path.is_empty() { "the spec".to_string() } else { format!("`{}`", show(path)) };
        let mut full = path.to_vec();
        full.push(key.to_string());
        let mut d = Diagnostic::new(format!("unknown field `{key}` in {section}"), Some(e.key_span.clone()))
            .at(show(&full))
            .label(format!("not a field of {section}"));
        let names: Vec<&str> = props.map(|p| p.keys().map(String::as_str).collect()).unwrap_or_default();
        let here = show(path);
        let alias = ALIASES.iter().find(|(a, _)| *a == key).map(|(_, full)| *full);
        let elsewhere = || self.field_paths().into_iter().find(|p| p.rsplit('.').next() == Some(key) && p.contains('.'));
        if let Some(full) = alias {
            match full.rsplit_once('.') {
                Some((section, field)) if section == here => d = d.hint(format!("did you mean `{field}`?")),
                _ => d = d.hint(format!("`{key}` belongs elsewhere: `{full}`")),
            }
        } else if let Some(s) = did_you_mean(key, names.iter().copied()) {
            d = d.hint(format!("did you mean `{s}`?"));
        } else if let Some(target) = elsewhere() {
            d = d.hint(format!("`{key}` belongs elsewhere: `{}`", target.replace("[]", "[i]")));
        } else if !names.is_empty() {
            d = d.hint(format!("fields of {section}: {}", names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")));
        }
        if key == "batch_size" && here != "grpo" {
            d = d.hint("rlx names the batch shape `grpo.prompts_per_step` (problems per step) and `grpo.group_size` (completions per problem)");
        }
        d
    }

    fn check_alternatives(&self, alts: &[J], node: &Node, path: &mut Vec<String>, out: &mut Vec<Diagnostic>) {
        let resolved: Vec<&J> = alts.iter().map(|a| self.resolve(a)).collect();
        // A plain enum: every alternative is a constant.
        if resolved.iter().all(|a| a.get("const").is_some()) {
            let consts: Vec<&J> = resolved.iter().filter_map(|a| a.get("const")).collect();
            self.check_consts(&consts, node, path, out);
            return;
        }
        // Option<T>: null is fine, anything else must match T.
        if matches!(node.value, Value::Null) && resolved.iter().any(|a| self.types(a).contains(&"null")) {
            return;
        }
        // A tagged enum: dispatch on `kind`.
        let tags: Vec<Option<&str>> = resolved
            .iter()
            .map(|a| a.get("properties").and_then(|p| p.get("kind")).and_then(|k| k.get("const")).and_then(J::as_str))
            .collect();
        if tags.iter().all(Option::is_some) {
            let tags: Vec<&str> = tags.into_iter().flatten().collect();
            let listed = tags.iter().map(|t| format!("`{t}`")).collect::<Vec<_>>().join(", ");
            let Value::Map(_) = node.value else {
                let mut d = self
                    .diag(format!("`{}` must be a mapping with a `kind`, found {} `{}`", show(path), node.kind_name(), excerpt(node)), node, path)
                    .label("expected a mapping");
                if let Value::Str(s) = &node.value
                    && tags.contains(&s.as_str())
                {
                    d = d.hint(format!("write `{{kind: {s}}}`"));
                }
                out.push(d.hint(format!("`kind` is one of {listed}")));
                return;
            };
            let Some(kind) = node.entry("kind") else {
                out.push(self.diag(format!("missing field `kind` in `{}`", show(path)), node, path).hint(format!("`kind` is one of {listed}")));
                return;
            };
            let Value::Str(k) = &kind.value.value else {
                out.push(self.diag(format!("`{}.kind` must be a string", show(path)), &kind.value, path));
                return;
            };
            match tags.iter().position(|t| t == k) {
                Some(i) => {
                    let mut errs = vec![];
                    self.check(resolved[i], node, path, &mut errs);
                    out.extend(errs.into_iter().map(|d| self.other_variants_key(d, path, k, &tags, &resolved)));
                }
                None => {
                    let mut kp = path.clone();
                    kp.push("kind".into());
                    let mut d = Diagnostic::new(format!("unknown `{}` `{k}`", show(&kp)), Some(kind.value.span.clone()))
                        .at(show(&kp))
                        .label(format!("expected one of {listed}"));
                    if let Some(s) = did_you_mean(k, tags.iter().copied()) {
                        d = d.hint(format!("did you mean `{s}`?"));
                    } else {
                        d = d.hint(format!("`kind` is one of {listed}"));
                    }
                    out.push(d);
                }
            }
            return;
        }
        // General case: the first alternative that fits; else the errors of the only non-null one.
        let mut best: Option<Vec<Diagnostic>> = None;
        for a in &resolved {
            let mut errs = vec![];
            self.check(a, node, path, &mut errs);
            if errs.is_empty() {
                return;
            }
            if !self.types(a).contains(&"null") || self.types(a).len() > 1 {
                best = Some(match best {
                    Some(b) if b.len() <= errs.len() => b,
                    _ => errs,
                });
            }
        }
        out.extend(best.unwrap_or_default());
    }

    /// An unknown key of variant `kind` that another variant of the same tagged enum has
    /// (`max_tokens_per_microbatch` under `backend.kind: tinker`): said as such, with how to drop
    /// it, rather than as a typo or a key that "belongs elsewhere" at the same path.
    fn other_variants_key(&self, d: Diagnostic, path: &[String], kind: &str, tags: &[&str], variants: &[&J]) -> Diagnostic {
        let here = show(path);
        let Some(key) = d.path.as_deref().and_then(|p| p.strip_prefix(here.as_str())).and_then(|k| k.strip_prefix('.')).map(str::to_string) else { return d };
        if !d.message.starts_with("unknown field `") || key.contains(['.', '[']) {
            return d;
        }
        let owners: Vec<&str> = tags.iter().zip(variants).filter(|(_, v)| v.get("properties").is_some_and(|p| p.get(&key).is_some())).map(|(t, _)| *t).collect();
        if owners.is_empty() {
            return d;
        }
        let kinds = owners.iter().map(|t| format!("`{here}.kind: {t}`")).collect::<Vec<_>>().join(" or ");
        let full = format!("{here}.{key}");
        Diagnostic { message: format!("`{full}` is only for {kinds}, and this `{here}` is `kind: {kind}`"), label: format!("not a setting of `kind: {kind}`"), hints: vec![], ..d }
            .hint(format!("remove `{key}` from `{here}`, or drop it on the command line with `~{full}` (docs/specs.md, \"Moving a spec to another backend\")"))
    }

    fn check_consts(&self, consts: &[&J], node: &Node, path: &[String], out: &mut Vec<Diagnostic>) {
        let json = node.to_json();
        if consts.contains(&&json) {
            return;
        }
        let names: Vec<&str> = consts.iter().filter_map(|c| c.as_str()).collect();
        let listed = consts.iter().map(|c| format!("`{}`", c.as_str().map_or(c.to_string(), str::to_string))).collect::<Vec<_>>().join(", ");
        let mut d = self
            .diag(format!("`{}` must be one of {listed}, found `{}`", show(path), excerpt(node)), node, path)
            .label(format!("expected one of {listed}"));
        if let Value::Str(s) = &node.value
            && let Some(m) = did_you_mean(s, names.iter().copied())
        {
            d = d.hint(format!("did you mean `{m}`?"));
        }
        out.push(d);
    }

    fn diag(&self, message: String, node: &Node, path: &[String]) -> Diagnostic {
        Diagnostic::new(message, Some(node.span.clone())).at(show(path))
    }
}

/// A key path for messages: `data.train[0].path`.
pub fn show(path: &[String]) -> String {
    let mut s = String::new();
    for seg in path {
        if seg.parse::<usize>().is_ok() {
            s.push_str(&format!("[{seg}]"));
        } else {
            if !s.is_empty() {
                s.push('.');
            }
            s.push_str(seg);
        }
    }
    if s.is_empty() { "<spec>".into() } else { s }
}

fn type_matches(t: &str, node: &Node) -> bool {
    matches!(
        (t, &node.value),
        ("null", Value::Null)
            | ("boolean", Value::Bool(_))
            | ("integer", Value::Int(_))
            | ("number", Value::Int(_) | Value::Float(_))
            | ("string", Value::Str(_))
            | ("array", Value::Seq(_))
            | ("object", Value::Map(_))
    )
}

fn type_name(t: &str) -> &'static str {
    match t {
        "object" => "a mapping",
        "array" => "a list",
        "string" => "a string",
        "integer" => "an integer",
        "number" => "a number",
        "boolean" => "`true` or `false`",
        "null" => "null",
        _ => "a value",
    }
}

fn type_hint(types: &[&str], node: &Node) -> Option<String> {
    match (&node.value, types) {
        (Value::Str(s), t) if t.contains(&"boolean") && ["yes", "no", "on", "off", "y", "n"].contains(&s.to_lowercase().as_str()) => {
            Some("YAML 1.2 reads only `true` and `false` as booleans".into())
        }
        (Value::Float(f), t) if t.contains(&"integer") && f.fract() == 0.0 => Some(format!("write it as an integer: `{}`", *f as i64)),
        (Value::Str(s), t) if (t.contains(&"number") || t.contains(&"integer")) && s.trim().parse::<f64>().is_ok() => {
            Some("remove the quotes to make it a number".into())
        }
        (Value::Int(_) | Value::Float(_) | Value::Bool(_), t) if t.contains(&"string") => {
            Some("quote it to make it a string".into())
        }
        (Value::Str(_) | Value::Int(_) | Value::Float(_) | Value::Bool(_), t) if t.contains(&"array") => {
            Some(format!("write a list: `[{}]`", excerpt(node)))
        }
        _ => None,
    }
}

fn excerpt(node: &Node) -> String {
    let t = node.span.text().trim();
    let t = t.lines().next().unwrap_or("");
    if t.chars().count() > 40 { format!("{}…", t.chars().take(40).collect::<String>()) } else { t.to_string() }
}

fn num(x: f64) -> String {
    if x.fract() == 0.0 && x.abs() < 1e15 { format!("{}", x as i64) } else { format!("{x}") }
}

fn first_sentence(s: &str) -> String {
    let s = s.replace('\n', " ");
    match s.find(". ") {
        Some(i) => s[..=i].to_string(),
        None => s,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::node::parse;
    use crate::spec::source::Source;
    use std::path::Path;

    fn errors(yaml: &str) -> Vec<Diagnostic> {
        let src = Source::file(Path::new("s.yaml"), yaml.to_string());
        Validator::new().validate(&parse(&src).unwrap())
    }

    const MIN: &str = "name: t\nmodel: {base: m}\nbackend: {kind: local}\ndata: {train: [{path: d.jsonl}]}\nprompt: {user: u.j2}\n";

    #[test]
    fn minimal_spec_is_valid() {
        assert!(errors(MIN).is_empty(), "{:?}", errors(MIN));
    }

    #[test]
    fn all_errors_at_once_with_paths_and_locations() {
        let yaml = format!("{MIN}optimizer:\n  learning_rte: 1e-5\n  beta1: fast\ngrpo:\n  group_size: 0\n  temperature: 1.0\n");
        let errs = errors(&yaml);
        assert_eq!(errs.len(), 4, "{errs:#?}");
        let unknown = &errs[0];
        assert_eq!(unknown.message, "unknown field `learning_rte` in `optimizer`");
        assert_eq!(unknown.path.as_deref(), Some("optimizer.learning_rte"));
        assert_eq!(unknown.span.as_ref().unwrap().location(), "s.yaml:7:3");
        assert_eq!(unknown.hints, vec!["did you mean `learning_rate`?"]);
        assert!(errs[1].message.contains("`optimizer.beta1` must be a number, found a string `fast`"));
        assert!(errs[2].message.contains("`grpo.group_size` must be ≥ 1"));
        assert!(errs[3].hints[0].contains("`sampling.temperature`"), "{:?}", errs[3]);
    }

    #[test]
    fn tagged_enums_dispatch_on_kind() {
        let errs = errors(&MIN.replace("{kind: local}", "{kind: tinkr}"));
        assert_eq!(errs.len(), 1);
        assert!(errs[0].message.contains("unknown `backend.kind` `tinkr`"));
        assert_eq!(errs[0].hints, vec!["did you mean `tinker`?"]);
        // A key of other variants is named as theirs, with the way to drop it.
        let errs = errors(&MIN.replace("{kind: local}", "{kind: local, base_url: x}"));
        assert_eq!(errs[0].message, "`backend.base_url` is only for `backend.kind: tinker` or `backend.kind: openai`, and this `backend` is `kind: local`", "{errs:?}");
        assert!(errs[0].hints[0].contains("`~backend.base_url`"), "{errs:?}");
        let errs = errors(&MIN.replace("{kind: local}", "{kind: local, base_ur: x}"));
        assert!(errs[0].message.contains("unknown field `base_ur` in `backend`"), "a typo stays a typo: {errs:?}");
        let errs = errors(&MIN.replace("{kind: local}", "local"));
        assert!(errs[0].hints.iter().any(|h| h.contains("{kind: local}")));
    }

    #[test]
    fn enums_missing_fields_and_integers() {
        let yaml = MIN.replace("prompt: {user: u.j2}\n", "prompt: {}\nsandbox: {kind: fusoin}\nschedule: {max_steps: 10.0}\n");
        let errs = errors(&yaml);
        assert_eq!(errs.len(), 3, "{errs:#?}");
        assert!(errs[0].message.contains("missing field `user` in `prompt`"));
        assert!(errs[1].hints.contains(&"did you mean `fusion`?".to_string()));
        assert!(errs[2].hints[0].contains("write it as an integer: `10`"));
    }

    #[test]
    fn aliases_hint_full_names() {
        let errs = errors(&format!("{MIN}optimizer: {{lr: 1e-5}}\n"));
        assert_eq!(errs[0].hints, vec!["did you mean `learning_rate`?"]);
        let errs = errors(&format!("{MIN}lr: 1e-5\n"));
        assert!(errs[0].hints[0].contains("`optimizer.learning_rate`"), "{errs:?}");
    }

    #[test]
    fn schema_at_knows_lists() {
        let v = Validator::new();
        assert!(v.is_list(&["eval", "k"]));
        assert!(v.is_list(&["sampling", "stop"]));
        assert!(!v.is_list(&["optimizer", "learning_rate"]));
        assert!(v.schema_at(&["data", "train", "0", "path"]).is_some());
        assert!(v.schema_at(&["backend", "base_url"]).is_some());
        assert!(v.schema_at(&["nope"]).is_none());
    }
}
