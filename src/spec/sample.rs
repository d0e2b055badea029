//! The grammar of sweep ranges: `lr=loguniform(1e-6,1e-4)`, `lr=uniform(1e-5,5e-5)`,
//! `seed=range(0,3)`, `group_size=choice(4,8,16)`.
//!
//! `rlx sweep --sample N` draws N configurations from them (see `crate::sweep_sample`); without
//! `--sample`, `range(...)` and `choice(...)` are ordinary grid axes and `uniform`/`loguniform`
//! are an error (a continuous range has no list of values). Every error points into the
//! command-line argument, like an override's.
//!
//! - `uniform(LOW, HIGH)`: a number in `[LOW, HIGH]`, each equally likely.
//! - `loguniform(LOW, HIGH)`: a number in `[LOW, HIGH]` whose logarithm is uniform (`0 < LOW`),
//!   for scale parameters such as learning rates.
//! - `range(START, STOP[, STEP])`: the integers `START, START+STEP, ...` below `STOP`, as in
//!   Python (`range(0,3)` is 0, 1, 2).
//! - `choice(A, B, ...)`: one of the YAML values listed (`[a,b]` and `a,b` mean the same).
//!
//! A value that merely looks like a call (`prompt.vars.x=f(y)`) stays an ordinary value unless
//! its name is close to one of these; quote it (`'uniform(1,2)'`) to pass such text through.

use super::diagnostic::{Diagnostic, did_you_mean};
use super::node::{self, Node, Value};
use super::overrides::{Axis, Override, split, split_top_level_commas};
use super::source::{Source, Span};

/// The names of the distributions, as written.
pub const NAMES: [&str; 4] = ["uniform", "loguniform", "range", "choice"];

/// What a key's value is drawn from.
#[derive(Debug, Clone)]
pub enum Distribution {
    /// `uniform(low, high)`.
    Uniform {
        /// Lower bound.
        low: f64,
        /// Upper bound (> `low`).
        high: f64,
    },
    /// `loguniform(low, high)`, `0 < low < high`.
    LogUniform {
        /// Lower bound.
        low: f64,
        /// Upper bound.
        high: f64,
    },
    /// `range(start, stop[, step])`: Python's integers.
    Range {
        /// First value.
        start: i64,
        /// Bound, excluded.
        stop: i64,
        /// Increment (not 0).
        step: i64,
    },
    /// `choice(a, b, ...)`: the values, located in the command line.
    Choice(Vec<Node>),
}

/// The most values a grid lists from one `range(...)` (a sweep has at most 4096 runs anyway).
pub const MAX_LISTED: u64 = 4096;

impl Distribution {
    /// How many integers a `range` holds (0 for the other kinds), counted, not listed.
    pub fn range_len(&self) -> u64 {
        let Distribution::Range { start, stop, step } = *self else { return 0 };
        let (start, stop, step) = (i128::from(start), i128::from(stop), i128::from(step));
        let (span, by) = if step > 0 { (stop - start, step) } else { (start - stop, -step) };
        if span <= 0 { 0 } else { u64::try_from((span + by - 1) / by).unwrap_or(u64::MAX) }
    }

    /// The `i`-th integer of a `range` (`i < range_len()`; 0 for the other kinds).
    pub fn range_value(&self, i: u64) -> i64 {
        let Distribution::Range { start, step, .. } = *self else { return 0 };
        i64::try_from(i128::from(start) + i128::from(step) * i128::from(i)).unwrap_or(start)
    }
}

/// One `KEY=DISTRIBUTION(...)` argument.
#[derive(Debug, Clone)]
pub struct Ranged {
    /// The key path after alias expansion.
    pub path: Vec<String>,
    /// What its value is drawn from.
    pub dist: Distribution,
    /// Where the key is written.
    pub key_span: Span,
    /// Where the whole `name(...)` is written.
    pub span: Span,
    /// The argument as given.
    pub raw: String,
}

impl Ranged {
    /// The dotted key path.
    pub fn dotted(&self) -> String {
        self.path.join(".")
    }

    /// The `name(...)` text as written.
    pub fn expression(&self) -> &str {
        self.span.text().trim()
    }

    /// The grid axis of a `range` or `choice` (their values in order), for `rlx sweep` without
    /// `--sample`.
    ///
    /// # Errors
    /// For `uniform` and `loguniform`, which have no list of values.
    pub fn to_axis(&self) -> Result<Axis, Diagnostic> {
        let values = match &self.dist {
            Distribution::Choice(nodes) => nodes.clone(),
            Distribution::Range { .. } => {
                let n = self.dist.range_len();
                if n > MAX_LISTED {
                    return Err(Diagnostic::new(format!("`{}` holds {n} values; a grid lists at most {MAX_LISTED}", self.expression()), Some(self.span.clone()))
                        .hint("draw from it with `--sample N`"));
                }
                (0..n).map(|i| value_node(&self.dist.range_value(i).to_string())).collect()
            }
            Distribution::Uniform { .. } | Distribution::LogUniform { .. } => {
                return Err(Diagnostic::new(format!("`{}` is a continuous range: a grid cannot list its values", self.expression()), Some(self.span.clone()))
                    .label("drawn from, not listed")
                    .hint("draw configurations from it with `--sample N`, or list values: `lr=[1e-5,4e-5]`"));
            }
        };
        Ok(Axis { path: self.path.clone(), values, key_span: self.key_span.clone(), raw: self.raw.clone() })
    }

    /// The override that sets this key to `text` (a value drawn from the range, written as
    /// YAML): its value is located in a text of its own, its key where the range's key is.
    pub fn with_value(&self, text: &str) -> Override {
        Override { path: self.path.clone(), value: value_node(text), key_span: self.key_span.clone(), raw: self.raw.clone() }
    }
}

/// A YAML value parsed from a command-line text of its own (a value rlx wrote, such as one
/// drawn from a range), so that it is recorded and applied like one the user typed.
fn value_node(text: &str) -> Node {
    let source = Source::cli(text);
    node::parse(&source).unwrap_or_else(|_| Node { value: Value::Str(text.to_string()), span: Span::new(&source, 0..text.len()) })
}

/// Parses `KEY=NAME(ARGS)`. `Ok(None)` when the value is not a distribution (an ordinary value
/// or axis, for [`super::overrides`]); an error for a distribution written wrongly.
///
/// # Errors
/// Every problem of the argument, located in it.
pub fn parse(arg: &str) -> Result<Option<Ranged>, Vec<Diagnostic>> {
    let Some(eq) = arg.find('=') else { return Ok(None) };
    let value = &arg[eq + 1..];
    let lead = value.len() - value.trim_start().len();
    let body = value.trim();
    let vstart = eq + 1 + lead;
    let name_len = body.bytes().take_while(|b| b.is_ascii_alphanumeric() || *b == b'_').count();
    let name = &body[..name_len];
    if name_len == 0 || !name.starts_with(|c: char| c.is_ascii_alphabetic()) || !body[name_len..].starts_with('(') {
        return Ok(None);
    }
    let (source, path, key_span, _) = split(arg).map_err(|d| vec![d])?;
    let name_span = Span::new(&source, vstart..vstart + name_len);
    if !NAMES.contains(&name) {
        return match did_you_mean(name, NAMES) {
            Some(m) => Err(vec![
                Diagnostic::new(format!("unknown range `{name}(...)`"), Some(name_span))
                    .label("not one of uniform, loguniform, range, choice")
                    .hint(format!("did you mean `{m}`?")),
            ]),
            None => Ok(None),
        };
    }
    let whole = Span::new(&source, vstart..vstart + body.len());
    if !body.ends_with(')') {
        let end = vstart + body.len();
        return Err(vec![
            Diagnostic::new(format!("`{name}(` is not closed"), Some(Span::new(&source, end.saturating_sub(1)..end)))
                .label("expected `)` at the end")
                .hint(format!("for example `{}`", example(name))),
        ]);
    }
    // The arguments between the parentheses, each located in `arg`.
    let inner_start = vstart + name_len + 1;
    let inner_end = vstart + body.len() - 1;
    let inner = &arg[inner_start..inner_end];
    let args: Vec<std::ops::Range<usize>> = if inner.trim().is_empty() {
        vec![]
    } else {
        split_top_level_commas(inner).into_iter().map(|r| (inner_start + r.start)..(inner_start + r.end)).collect()
    };
    let mut nodes = vec![];
    let mut diags = vec![];
    for r in &args {
        if arg[r.clone()].trim().is_empty() {
            diags.push(Diagnostic::new(format!("empty argument in `{name}(...)`"), Some(Span::new(&source, r.start..r.end.max(r.start + 1).min(arg.len())))));
            continue;
        }
        match node::parse_range(&source, r.clone()) {
            Ok(n) => nodes.push(n),
            Err(e) => diags.extend(e),
        }
    }
    if !diags.is_empty() {
        return Err(diags);
    }
    let dist = distribution(name, nodes, whole.clone())?;
    Ok(Some(Ranged { path, dist, key_span, span: whole, raw: arg.to_string() }))
}

/// The distribution `name(nodes)` written at `whole`, its arguments checked.
fn distribution(name: &str, nodes: Vec<Node>, whole: Span) -> Result<Distribution, Vec<Diagnostic>> {
    let arity = |want: &str, ok: bool| -> Result<(), Vec<Diagnostic>> {
        if ok {
            return Ok(());
        }
        Err(vec![
            Diagnostic::new(format!("`{name}` takes {want}, found {} argument(s)", nodes.len()), Some(whole.clone()))
                .hint(format!("for example `{}`", example(name))),
        ])
    };
    Ok(match name {
        "uniform" | "loguniform" => {
            arity("2 arguments (low, high)", nodes.len() == 2)?;
            let (low, high) = (number(&nodes[0])?, number(&nodes[1])?);
            let span = |i: usize| Some(nodes[i].span.clone());
            if low >= high {
                return Err(vec![Diagnostic::new(format!("`{name}` needs low < high, found {low} and {high}"), Some(whole)).label("an empty range")]);
            }
            if name == "loguniform" {
                if low <= 0.0 {
                    return Err(vec![
                        Diagnostic::new(format!("`loguniform` needs positive bounds, found {low}"), span(0))
                            .label("the logarithm of this is undefined")
                            .hint("use `uniform(...)` for a range that includes zero or negative values"),
                    ]);
                }
                Distribution::LogUniform { low, high }
            } else {
                Distribution::Uniform { low, high }
            }
        }
        "range" => {
            arity("2 or 3 integers (start, stop[, step])", nodes.len() == 2 || nodes.len() == 3)?;
            let start = integer(&nodes[0])?;
            let stop = integer(&nodes[1])?;
            let step = if nodes.len() == 3 { integer(&nodes[2])? } else { 1 };
            if step == 0 {
                return Err(vec![Diagnostic::new("`range` step cannot be 0", Some(nodes[2].span.clone()))]);
            }
            let d = Distribution::Range { start, stop, step };
            if d.range_len() == 0 {
                return Err(vec![
                    Diagnostic::new(format!("`{}` holds no value", whole.text()), Some(whole))
                        .label("the stop is excluded, as in Python")
                        .hint(format!("`range({start},{})` holds {start}", start.saturating_add(step.signum()))),
                ]);
            }
            d
        }
        _ => {
            arity("at least one value", !nodes.is_empty())?;
            Distribution::Choice(nodes)
        }
    })
}

fn example(name: &str) -> &'static str {
    match name {
        "uniform" => "lr=uniform(1e-5,5e-5)",
        "loguniform" => "lr=loguniform(1e-6,1e-4)",
        "range" => "seed=range(0,3)",
        _ => "group_size=choice(4,8,16)",
    }
}

fn number(n: &Node) -> Result<f64, Vec<Diagnostic>> {
    match n.value {
        Value::Int(i) => Ok(i as f64),
        Value::Float(f) if f.is_finite() => Ok(f),
        _ => Err(vec![Diagnostic::new(format!("`{}` is not a number", n.span.text().trim()), Some(n.span.clone())).label(format!("expected a number, found {}", n.kind_name()))]),
    }
}

fn integer(n: &Node) -> Result<i64, Vec<Diagnostic>> {
    match n.value {
        Value::Int(i) => Ok(i),
        _ => Err(vec![Diagnostic::new(format!("`{}` is not an integer", n.span.text().trim()), Some(n.span.clone())).label(format!("`range` counts in integers, found {}", n.kind_name()))]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ok(arg: &str) -> Ranged {
        parse(arg).unwrap().unwrap_or_else(|| panic!("{arg} is a range"))
    }

    fn err(arg: &str) -> Diagnostic {
        parse(arg).unwrap_err().remove(0)
    }

    #[test]
    fn the_four_kinds() {
        let r = ok("lr=loguniform(1e-6, 1e-4)");
        assert_eq!(r.dotted(), "optimizer.learning_rate");
        assert!(matches!(r.dist, Distribution::LogUniform { low, high } if low == 1e-6 && high == 1e-4));
        assert_eq!(r.expression(), "loguniform(1e-6, 1e-4)");
        assert!(matches!(ok("temperature=uniform(0,1.5)").dist, Distribution::Uniform { low: 0.0, high: 1.5 }));
        let values = |d: &Distribution| (0..d.range_len()).map(|i| d.range_value(i)).collect::<Vec<_>>();
        assert_eq!(values(&ok("seed=range(0,3)").dist), vec![0, 1, 2]);
        assert_eq!(values(&ok("seed=range(10,0,-4)").dist), vec![10, 6, 2]);
        assert_eq!(values(&ok("seed=range(0,10,3)").dist), vec![0, 3, 6, 9]);
        let huge = ok("seed=range(-9223372036854775808,9223372036854775807)");
        assert_eq!(huge.dist.range_len(), u64::MAX);
        assert_eq!(huge.dist.range_value(u64::MAX - 1), 9223372036854775806);
        assert!(huge.to_axis().unwrap_err().message.contains("a grid lists at most 4096"));
        let Distribution::Choice(v) = ok("eval.k=choice([1],[1,5])").dist else { panic!() };
        assert_eq!(v.len(), 2);
        assert_eq!(v[1].span.text(), "[1,5]");
        assert_eq!(v[1].span.location(), "command line:1:19");
    }

    #[test]
    fn ranges_and_choices_are_grid_axes() {
        let a = ok("seed=range(0,3)").to_axis().unwrap();
        assert_eq!(a.values.iter().map(|v| v.span.text()).collect::<Vec<_>>(), vec!["0", "1", "2"]);
        assert_eq!(a.at(2).canonical(), "seed=2");
        assert!(matches!(a.at(1).value.value, Value::Int(1)));
        let a = ok("group_size=choice(4, 8)").to_axis().unwrap();
        assert_eq!(a.at(1).canonical(), "grpo.group_size=8");
        let d = ok("lr=uniform(1e-5,2e-5)").to_axis().unwrap_err();
        assert!(d.hints[0].contains("--sample N"), "{d:?}");
        let o = ok("lr=uniform(1e-5,2e-5)").with_value("1.5e-5");
        assert_eq!(o.canonical(), "optimizer.learning_rate=1.5e-5");
        assert!(matches!(o.value.value, Value::Float(f) if f == 1.5e-5));
    }

    #[test]
    fn ordinary_values_are_not_ranges() {
        for a in ["lr=1e-5", "lr=[1e-5,2e-5]", "name=abc", "prompt.vars.x=f(y)", "name='uniform(1,2)'", "x=(1)", "x=9(1)"] {
            assert!(parse(a).unwrap().is_none(), "{a}");
        }
    }

    #[test]
    fn errors_point_into_the_argument() {
        let d = err("lr=loguniform(0,1e-4)");
        assert!(d.message.contains("positive bounds"), "{}", d.message);
        assert_eq!(d.span.unwrap().location(), "command line:1:15");
        let d = err("lr=loguniform(1e-4,1e-6)");
        assert!(d.message.contains("low < high"), "{}", d.message);
        let d = err("lr=logunifrom(1e-6,1e-4)");
        assert_eq!(d.hints, vec!["did you mean `loguniform`?".to_string()]);
        assert_eq!(d.span.unwrap().text(), "logunifrom");
        let d = err("lr=uniform(1e-6)");
        assert!(d.message.contains("takes 2 arguments"), "{}", d.message);
        let d = err("lr=uniform(1e-6,abc)");
        assert!(d.message.contains("`abc` is not a number"), "{}", d.message);
        assert_eq!(d.span.unwrap().location(), "command line:1:17");
        let d = err("seed=range(0,1.5)");
        assert!(d.message.contains("not an integer"), "{}", d.message);
        let d = err("seed=range(3,3)");
        assert!(d.message.contains("holds no value"), "{}", d.message);
        assert!(err("seed=range(0,3,0)").message.contains("cannot be 0"));
        let d = err("lr=loguniform(1e-6,1e-4");
        assert!(d.message.contains("not closed"), "{}", d.message);
        assert!(err("lr=uniform(1,,2)").message.contains("empty argument"));
        assert!(err("group_size=choice()").message.contains("at least one value"));
        assert!(err("a..b=uniform(1,2)").message.contains("invalid key"));
    }
}
