//! Problems found in a spec, as data: a message, where it is, and hints.
//!
//! Rendering (snippets, colours) is `cli::diagnostics`' job; this module only says what and where.

use std::fmt;

use super::source::Span;

/// One problem in a spec (or an override, or a template it names).
#[derive(Debug, Clone)]
pub struct Diagnostic {
    /// One line saying what is wrong, with names and values in backticks.
    pub message: String,
    /// Dotted key path of the offending value (`optimizer.learning_rate`), when there is one.
    pub path: Option<String>,
    /// Where it is; `None` for problems with no single location (e.g. a missing file argument).
    pub span: Option<Span>,
    /// Short text shown under the caret.
    pub label: String,
    /// `help:` lines: "did you mean", how to fix it.
    pub hints: Vec<String>,
}

impl Diagnostic {
    /// A diagnostic with a message and a location.
    pub fn new(message: impl Into<String>, span: Option<Span>) -> Self {
        Diagnostic { message: message.into(), path: None, span, label: String::new(), hints: vec![] }
    }

    /// Sets the key path.
    pub fn at(mut self, path: impl Into<String>) -> Self {
        let p = path.into();
        self.path = if p.is_empty() { None } else { Some(p) };
        self
    }

    /// Sets the caret label.
    pub fn label(mut self, label: impl Into<String>) -> Self {
        self.label = label.into();
        self
    }

    /// Adds a hint.
    pub fn hint(mut self, hint: impl Into<String>) -> Self {
        self.hints.push(hint.into());
        self
    }

    /// Adds a hint if there is one.
    pub fn maybe_hint(mut self, hint: Option<String>) -> Self {
        self.hints.extend(hint);
        self
    }
}

impl fmt::Display for Diagnostic {
    /// A plain one-line-per-fact form: `file:line:col: message` plus hints. Used in logs and
    /// where no terminal renderer is at hand.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(span) = &self.span {
            write!(f, "{}: ", span.location())?;
        }
        write!(f, "{}", self.message)?;
        for h in &self.hints {
            write!(f, "\n  help: {h}")?;
        }
        Ok(())
    }
}

/// Several diagnostics, reported together.
#[derive(Debug, Clone, Default)]
pub struct Diagnostics(pub Vec<Diagnostic>);

impl fmt::Display for Diagnostics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            write!(f, "{d}")?;
        }
        Ok(())
    }
}

/// The closest candidate to `name` among `candidates`, if one is close enough to be a typo.
pub(crate) fn did_you_mean<'a>(name: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let mut best: Option<(&str, f64)> = None;
    for c in candidates {
        let score = strsim::jaro_winkler(&name.to_lowercase(), &c.to_lowercase());
        let edits = strsim::damerau_levenshtein(name, c);
        // Either very similar as a whole, or a couple of keystrokes away.
        let close = score >= 0.85 || (edits <= 2 && c.len() > 2) || (name.len() > 3 && c.contains(name));
        if close && best.is_none_or(|(_, s)| score > s) {
            best = Some((c, score));
        }
    }
    best.map(|(c, _)| c)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suggests_typos_not_strangers() {
        let keys = ["learning_rate", "beta1", "beta2", "eps", "weight_decay"];
        assert_eq!(did_you_mean("learning_rte", keys), Some("learning_rate"));
        assert_eq!(did_you_mean("learnig_rate", keys), Some("learning_rate"));
        assert_eq!(did_you_mean("beta3", keys), Some("beta1"));
        assert_eq!(did_you_mean("momentum", keys), None);
        assert_eq!(did_you_mean("temprature", ["temperature", "top_p"]), Some("temperature"));
    }
}
