//! `.env` in the working directory: the keys rlx reads (Tinker's, the trackers', the Hub's, an
//! OpenAI-compatible server's), set into the environment when the real environment lacks them.
//!
//! The reference workflow keeps `TINKER_API_KEY` in a `.env` file; reading it here saves a
//! `source .env` and the key ending up in shell history. Only names rlx can use are taken, so a
//! project's unrelated `.env` entries (`DATABASE_URL`, `PATH`) never leak into runs; the real
//! environment always wins; and values are never logged (only the names, at debug level) nor
//! written anywhere: provenance records neither.
//!
//! The syntax is the common subset of python-dotenv and the shell: `KEY=value`, optional `export `,
//! `#` comments on their own line or after an unquoted value, `'literal'` and `"escaped\n"`
//! values. A line that is none of these is skipped with a warning naming `.env:LINE`.

use std::path::Path;

/// The file name, in the working directory.
pub const FILE: &str = ".env";

/// Name prefixes of the variables rlx (or a tracker or tool it starts) reads.
const PREFIXES: &[&str] = &["TINKER_", "WANDB_", "MLFLOW_", "HF_", "HUGGING_FACE_", "OPENAI_", "RLX_", "CWSANDBOX_"];

/// Whether rlx takes `name` from a `.env` file: its own families, and any `*_API_KEY` (a spec's
/// `backend.api_key_env` may name one of the user's choosing).
pub fn wanted(name: &str) -> bool {
    PREFIXES.iter().any(|p| name.starts_with(p)) || name.ends_with("_API_KEY")
}

/// What reading `.env` found.
#[derive(Debug, Default, PartialEq)]
pub struct Parsed {
    /// `(name, value)` in file order.
    pub vars: Vec<(String, String)>,
    /// Lines that could not be read: `(line number, why)`.
    pub bad: Vec<(usize, String)>,
}

/// Parses the text of a `.env` file.
pub fn parse(text: &str) -> Parsed {
    let mut out = Parsed::default();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let line = line.strip_prefix("export ").map_or(line, str::trim_start);
        let Some((name, value)) = line.split_once('=') else {
            out.bad.push((i + 1, "expected `NAME=value`".into()));
            continue;
        };
        let name = name.trim();
        if name.is_empty() || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') || name.starts_with(|c: char| c.is_ascii_digit()) {
            out.bad.push((i + 1, format!("`{name}` is not a variable name")));
            continue;
        }
        match value_of(value.trim()) {
            Ok(v) => out.vars.push((name.to_string(), v)),
            Err(why) => out.bad.push((i + 1, why)),
        }
    }
    out
}

fn value_of(v: &str) -> Result<String, String> {
    if let Some(rest) = v.strip_prefix('\'') {
        let end = rest.find('\'').ok_or("a `'` value is not closed")?;
        return Ok(rest[..end].to_string());
    }
    if let Some(rest) = v.strip_prefix('"') {
        let mut s = String::new();
        let mut chars = rest.chars();
        while let Some(c) = chars.next() {
            match c {
                '"' => return Ok(s),
                '\\' => match chars.next() {
                    Some('n') => s.push('\n'),
                    Some('t') => s.push('\t'),
                    Some(c) => s.push(c),
                    None => break,
                },
                c => s.push(c),
            }
        }
        return Err("a `\"` value is not closed".into());
    }
    // Unquoted: a ` #` starts a comment, as in the shell.
    let v = v.find(" #").map_or(v, |i| &v[..i]);
    Ok(v.trim_end().to_string())
}

/// Reads `dir/.env` and sets each wanted variable the environment does not already have.
/// Returns the names set (for a debug line) and the file's unreadable lines.
///
/// # Safety
/// Writes the process environment: call it before any other thread is started (first thing in
/// `main`), as [`crate::backend::local::cpu::configure`].
pub unsafe fn load(dir: &Path) -> (Vec<String>, Vec<(usize, String)>) {
    let Ok(text) = std::fs::read_to_string(dir.join(FILE)) else { return (vec![], vec![]) };
    let parsed = parse(&text);
    let mut set = vec![];
    for (name, value) in parsed.vars {
        if wanted(&name) && std::env::var_os(&name).is_none() {
            // SAFETY: the caller guarantees no other thread exists.
            unsafe { std::env::set_var(&name, value) };
            set.push(name);
        }
    }
    (set, parsed.bad)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_common_syntax() {
        let p = parse(
            "# comment\n\nTINKER_API_KEY=tml-abc\nexport WANDB_API_KEY = 'lit # not a comment'\nHF_TOKEN=\"a\\\"b\\nc\"\nRLX_X=plain value # trailing\nbroken line\n1BAD=x\nOPENAI_API_KEY=\"open\n",
        );
        assert_eq!(
            p.vars,
            vec![
                ("TINKER_API_KEY".into(), "tml-abc".into()),
                ("WANDB_API_KEY".into(), "lit # not a comment".into()),
                ("HF_TOKEN".into(), "a\"b\nc".into()),
                ("RLX_X".into(), "plain value".into()),
            ]
        );
        assert_eq!(p.bad.iter().map(|b| b.0).collect::<Vec<_>>(), vec![7, 8, 9]);
    }

    #[test]
    fn only_names_rlx_reads() {
        assert!(wanted("TINKER_API_KEY") && wanted("WANDB_API_KEY") && wanted("HF_TOKEN") && wanted("MY_SERVER_API_KEY"));
        assert!(!wanted("PATH") && !wanted("DATABASE_URL") && !wanted("LD_PRELOAD"));
        assert!(wanted("CWSANDBOX_BASE_URL"), "the CoreWeave Sandbox endpoint may live in .env with its key");
    }
}
