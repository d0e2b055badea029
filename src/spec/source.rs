//! Source texts and spans: where every value of a spec came from.
//!
//! A spec is assembled from several texts (the YAML file, each command-line override, a template
//! file named by the spec), and every error must point into the right one. A [`Span`] holds its
//! [`Source`] by `Arc`, so diagnostics are self-contained and can be rendered long after parsing.

use std::fmt;
use std::io::Read as _;
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

/// The largest spec file rlx reads: 4 MiB. A real spec is a few kilobytes (the largest shipped
/// one is under 4 KB); past this, parsing and checking a file costs far more memory than its size
/// (a 40 MB list of stop strings took 3.3 GB), so the file is refused before it is read.
pub const MAX_SPEC_BYTES: u64 = 4 * 1024 * 1024;

/// Reads a spec file, refusing one larger than [`MAX_SPEC_BYTES`] (checked on its size before
/// reading, and again while reading, for a pipe or a file that grows).
///
/// # Errors
/// The file cannot be read, is not UTF-8, or is too large (`ErrorKind::FileTooLarge`, with a
/// message naming the limit).
pub fn read_spec(path: &Path) -> std::io::Result<String> {
    let file = std::fs::File::open(path)?;
    let too_large = |size: &str| {
        std::io::Error::new(
            std::io::ErrorKind::FileTooLarge,
            format!("the file holds {size} bytes; a spec may hold at most {MAX_SPEC_BYTES} bytes (4 MiB)"),
        )
    };
    let len = file.metadata()?.len();
    if len > MAX_SPEC_BYTES {
        return Err(too_large(&len.to_string()));
    }
    let mut text = String::new();
    file.take(MAX_SPEC_BYTES + 1).read_to_string(&mut text)?;
    if text.len() as u64 > MAX_SPEC_BYTES {
        return Err(too_large("more than"));
    }
    Ok(text)
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

    #[test]
    fn read_spec_refuses_files_past_the_cap() {
        let dir = tempfile::tempdir().unwrap();
        let ok = dir.path().join("ok.yaml");
        std::fs::write(&ok, "a".repeat(MAX_SPEC_BYTES as usize)).unwrap();
        assert_eq!(read_spec(&ok).unwrap().len() as u64, MAX_SPEC_BYTES);
        let big = dir.path().join("big.yaml");
        std::fs::write(&big, "a".repeat(MAX_SPEC_BYTES as usize + 1)).unwrap();
        let e = read_spec(&big).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::FileTooLarge);
        assert!(e.to_string().contains("at most 4194304 bytes (4 MiB)"), "{e}");
    }
}
