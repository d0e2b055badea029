//! Source texts and spans: where every value of a spec came from.
//!
//! A spec is assembled from several texts (the YAML file, each command-line override, a template
//! file named by the spec), and every error must point into the right one. A [`Span`] holds its
//! [`Source`] by `Arc`, so diagnostics are self-contained and can be rendered long after parsing.

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A text that values are parsed from.
#[derive(Debug)]
pub struct Source {
    /// What to call it in messages: a file path, or `command line`.
    pub name: String,
    /// The text itself.
    pub text: String,
    /// Relative paths written in this text are resolved against this directory.
    pub base_dir: PathBuf,
    /// True for command-line text (overrides), false for files.
    pub is_cli: bool,
}

impl Source {
    /// A file's text; relative paths in it resolve against the file's directory.
    pub fn file(path: &Path, text: String) -> Arc<Source> {
        let base_dir = path.parent().map(Path::to_path_buf).unwrap_or_default();
        Arc::new(Source { name: path.display().to_string(), text, base_dir, is_cli: false })
    }

    /// One command-line argument; relative paths in it resolve against the current directory.
    pub fn cli(text: &str) -> Arc<Source> {
        Arc::new(Source { name: "command line".into(), text: text.to_string(), base_dir: PathBuf::new(), is_cli: true })
    }

    /// 1-based line and column (in characters) of a byte offset.
    pub fn line_col(&self, offset: usize) -> (usize, usize) {
        let offset = offset.min(self.text.len());
        let before = &self.text[..floor_char_boundary(&self.text, offset)];
        let line = before.matches('\n').count() + 1;
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        let col = before[line_start..].chars().count() + 1;
        (line, col)
    }
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while i > 0 && !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

/// A byte range in a [`Source`].
#[derive(Clone)]
pub struct Span {
    /// The text the range points into.
    pub source: Arc<Source>,
    /// Byte offsets into `source.text`.
    pub range: Range<usize>,
}

impl Span {
    /// A span covering `range` of `source`.
    pub fn new(source: &Arc<Source>, range: Range<usize>) -> Span {
        Span { source: Arc::clone(source), range }
    }

    /// `file:line:column` of the start.
    pub fn location(&self) -> String {
        let (line, col) = self.source.line_col(self.range.start);
        format!("{}:{line}:{col}", self.source.name)
    }

    /// The spanned text.
    pub fn text(&self) -> &str {
        self.source.text.get(self.range.clone()).unwrap_or("")
    }
}

impl fmt::Debug for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}({:?})", self.location(), self.range)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_col_counts_characters() {
        let s = Source::file(Path::new("a.yaml"), "ab\ncé: 1\n".into());
        assert_eq!(s.line_col(0), (1, 1));
        assert_eq!(s.line_col(3), (2, 1));
        // `é` is two bytes but one column.
        assert_eq!(s.line_col(7), (2, 4));
        assert_eq!(Span::new(&s, 3..5).location(), "a.yaml:2:1");
    }
}
