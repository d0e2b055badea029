//! Output checkers on the Rust side: what grading through Sandbox Fusion's own languages
//! (`cpp`, one `/run_code` per test) compares with, since there the harness does not run.
//!
//! The same functions as `stdin_output_matches` and `check_output` in `harness.py` (a test
//! runs both on the same cases). Python's `str.splitlines`, `str.strip` and `float` are
//! followed where the ladder depends on them.

use crate::spec::types::Checker;

/// Whether `captured` stdout matches `expected` by `checker`.
pub(crate) fn check_output(checker: Checker, captured: &str, expected: &str) -> bool {
    match checker {
        Checker::Lcb => stdin_output_matches(captured, expected),
        Checker::Exact => {
            let norm = |t: &str| t.replace("\r\n", "\n").trim_end().split('\n').map(str::trim_end).collect::<Vec<_>>().join("\n");
            norm(captured) == norm(expected)
        }
        Checker::Tokens => captured.split_whitespace().eq(expected.split_whitespace()),
        Checker::Float => {
            let (a, b): (Vec<&str>, Vec<&str>) = (captured.split_whitespace().collect(), expected.split_whitespace().collect());
            a.len() == b.len() && a.iter().zip(&b).all(|(x, y)| float_close(x, y))
        }
    }
}

fn float_close(a: &str, b: &str) -> bool {
    match (py_float(a), py_float(b)) {
        (Some(x), Some(y)) if x.is_nan() || y.is_nan() => false,
        (Some(x), Some(y)) if x.is_infinite() || y.is_infinite() => x == y,
        (Some(x), Some(y)) => (x - y).abs() <= 1e-6 * y.abs().max(1.0),
        _ => a == b,
    }
}

/// Python's `float(s)` for the forms programs print (no `_` digit separators).
fn py_float(s: &str) -> Option<f64> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if ["inf", "infinity", "nan"].contains(&body) {
        let v = if body == "nan" { f64::NAN } else { f64::INFINITY };
        return Some(if lower.starts_with('-') { -v } else { v });
    }
    if body.is_empty() || !body.starts_with(|c: char| c.is_ascii_digit() || c == '.') {
        return None;
    }
    t.parse().ok()
}

/// Python's `str.splitlines()`.
fn splitlines(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut it = s.char_indices().peekable();
    while let Some((i, c)) = it.next() {
        if matches!(c, '\n' | '\r' | '\x0b' | '\x0c' | '\x1c' | '\x1d' | '\x1e' | '\u{85}' | '\u{2028}' | '\u{2029}') {
            out.push(&s[start..i]);
            let mut end = i + c.len_utf8();
            if c == '\r' && it.peek().is_some_and(|&(_, n)| n == '\n') {
                it.next();
                end += 1;
            }
            start = end;
        }
    }
    if start < s.len() {
        out.push(&s[start..]);
    }
    out
}

/// Python's `str.strip()` (Unicode whitespace).
fn strip(s: &str) -> &str {
    s.trim_matches(|c: char| c.is_whitespace() || matches!(c, '\x1c'..='\x1f'))
}

/// The LiveCodeBench stdin ladder (`stdin_output_matches` in `harness.py`).
pub(crate) fn stdin_output_matches(captured: &str, expected: &str) -> bool {
    let out = splitlines(captured);
    let exp = strip(expected);
    if strip(&out.join("\n")) == exp {
        return true;
    }
    if strip(&out.iter().map(|o| strip(o)).collect::<Vec<_>>().join("\n")) == exp {
        return true;
    }
    if out.len() == 1 && out[0] == expected {
        return true;
    }
    let exp_lines: Vec<&str> = expected.split('\n').filter(|x| !x.is_empty()).map(strip).collect();
    if out == exp_lines {
        return true;
    }
    let out: Vec<&str> = out.into_iter().filter(|o| !o.is_empty()).collect();
    if out == exp_lines {
        return true;
    }
    let digits = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_digit());
    if out.iter().zip(&exp_lines).all(|(o, e)| digits(o) && digits(e)) {
        return false;
    }
    let parse = |v: &[&str]| v.iter().map(|x| py_float(x)).collect::<Option<Vec<f64>>>();
    match (parse(&out), parse(&exp_lines)) {
        (Some(a), Some(b)) if a.len() == b.len() => a.iter().zip(&b).all(|(x, y)| {
            if x.is_infinite() || y.is_infinite() { x == y } else { (x - y).abs() <= 1e-8 + 1e-5 * y.abs() }
        }),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ladder_and_the_checkers() {
        assert!(stdin_output_matches("3\n", "3"));
        assert!(stdin_output_matches("1 2 \n3\n", "1 2\n3\n"));
        assert!(stdin_output_matches("\n1\n\n2\n", "1\n2"));
        assert!(stdin_output_matches("0.3333333\n", "0.33333333"));
        assert!(!stdin_output_matches("12\n", "13"));
        assert!(!stdin_output_matches("1\n2\n", "1\n2\n3"));
        assert!(check_output(Checker::Tokens, "1  2\n3", "1 2 3\n"));
        assert!(!check_output(Checker::Exact, "1  2\n3", "1 2 3\n"));
        assert!(check_output(Checker::Exact, "1 2 \r\n3\n\n", "1 2\n3"));
        assert!(check_output(Checker::Float, "0.1000004 2", "0.1 2.0"));
        assert!(!check_output(Checker::Float, "0.10001 2", "0.1 2.0"));
        assert!(!check_output(Checker::Float, "nan", "nan"));
    }
}
