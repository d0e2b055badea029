//! What `compare` knows about metric names: the defaults, which direction is better, which are
//! fractions (shown in percent, differences in percentage points), and how numbers print.

use std::collections::BTreeSet;

use crate::runlog::metrics::{eval, train};

/// The metrics reported when none is named: the smallest-k `eval/pass@k` and
/// `train/reward_mean`, then for runs with tool turns their tool use (turns, calls, tool errors,
/// limit stops and each stop reason's rate), those the runs have; else the first metric any run
/// has. Tool use goes after pass@k, which still decides: it says how a score was reached.
pub(crate) fn defaults(known: &BTreeSet<String>) -> Vec<String> {
    let mut out = vec![];
    if let Some(p) = known.iter().filter(|k| eval::parse_pass_at(k).is_some()).min_by_key(|k| eval::parse_pass_at(k)) {
        out.push(p.clone());
    }
    let tool_use = [train::TURNS_MEAN, train::TOOL_CALLS_MEAN, train::TOOL_ERROR_RATE, train::LIMIT_STOP_RATE];
    for m in std::iter::once(train::REWARD_MEAN).chain(tool_use) {
        if known.contains(m) {
            out.push(m.to_string());
        }
    }
    out.extend(known.iter().filter(|k| k.starts_with(train::STOP_PREFIX)).cloned());
    if out.is_empty() {
        out.extend(known.iter().next().cloned());
    }
    out
}

/// Whether a higher value is better: false for costs (losses, times, latencies, errors,
/// negative log-likelihoods, truncation, skipped or dropped groups, KL), true otherwise.
pub(crate) fn higher_is_better(m: &str) -> bool {
    let costs = ["loss", "nll", "infra", "truncated", "skipped", "dropped", "kl_", "grad_norm", "compile_error", "tool_error", "parse_error", "limit_stop"];
    // Every stop reason but `completed` is a limit.
    let limit = m.starts_with(train::STOP_PREFIX) && !m.ends_with("_completed");
    !(limit || m.starts_with("time/") || m.starts_with("sandbox/") || costs.iter().any(|c| m.contains(c)))
}

/// Whether the metric is a fraction in 0–1 (shown in percent).
pub(crate) fn is_fraction(m: &str) -> bool {
    eval::parse_pass_at(m).is_some() || m.starts_with(train::STOP_PREFIX) || m.ends_with("_rate") || m.ends_with("correct_mean") || m.ends_with("correct_first_attempt") || m.ends_with("clip_fraction")
}

/// The closest known metric name, for "did you mean".
pub(crate) fn suggest(m: &str, known: &BTreeSet<String>) -> Option<String> {
    known
        .iter()
        .map(|k| (strsim::jaro_winkler(m, k), k))
        .filter(|(s, _)| *s > 0.8)
        .max_by(|a, b| a.0.total_cmp(&b.0))
        .map(|(_, k)| k.clone())
}

/// A value: `55.0%` for a fraction, 4 significant digits otherwise.
pub(crate) fn value(m: &str, v: f64) -> String {
    if v.is_nan() {
        return "—".into();
    }
    if is_fraction(m) { format!("{:.1}%", v * 100.0) } else { sig(v) }
}

/// A value without its unit (for cells under a `(%)` header): `55.0` for a fraction.
pub(crate) fn bare(m: &str, v: f64) -> String {
    if v.is_nan() {
        return "—".into();
    }
    if is_fraction(m) { format!("{:.1}", v * 100.0) } else { sig(v) }
}

/// A difference: `+12.5 pp` for a fraction, signed 4 significant digits otherwise.
pub(crate) fn delta(m: &str, v: f64) -> String {
    if is_fraction(m) {
        format!("{}{:.1} pp", if v >= 0.0 { "+" } else { "−" }, (v * 100.0).abs())
    } else {
        format!("{}{}", if v >= 0.0 { "+" } else { "−" }, sig(v.abs()))
    }
}

/// An interval `[lo, hi]` of differences, in the units of [`delta`] without the unit.
pub(crate) fn delta_ci(m: &str, lo: f64, hi: f64) -> String {
    let one = |v: f64| {
        let s = if is_fraction(m) { format!("{:.1}", (v * 100.0).abs()) } else { sig(v.abs()) };
        format!("{}{s}", if v >= 0.0 { "+" } else { "−" })
    };
    format!("[{}, {}]", one(lo), one(hi))
}

/// A p-value: 3 decimals, or scientific below 0.001.
pub(crate) fn p(v: f64) -> String {
    if v < 0.001 { format!("{v:.1e}") } else { format!("{v:.3}") }
}

/// 4 significant digits, without trailing zeros; large counts with thousands separators.
pub(crate) fn sig(v: f64) -> String {
    if !v.is_finite() {
        return v.to_string();
    }
    if v.abs() >= 10_000.0 {
        return thousands(v.round() as i64);
    }
    if v == 0.0 {
        return "0".into();
    }
    let digits = (3 - v.abs().log10().floor() as i32).clamp(0, 8) as usize;
    let s = format!("{v:.digits$}");
    if s.contains('.') { s.trim_end_matches('0').trim_end_matches('.').to_string() } else { s }
}

/// `1234567` → `1,234,567`.
pub(crate) fn thousands(n: i64) -> String {
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

/// Seconds as `42s`, `11m17s` or `2h05m`.
pub(crate) fn duration(s: f64) -> String {
    let s = s.round() as u64;
    match s {
        0..60 => format!("{s}s"),
        60..3600 => format!("{}m{:02}s", s / 60, s % 60),
        _ => format!("{}h{:02}m", s / 3600, s % 3600 / 60),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats() {
        assert_eq!(value("eval/pass@1", 0.425), "42.5%");
        assert_eq!(value("train/loss", 0.012_345), "0.01235");
        assert_eq!(delta("eval/pass@1", 0.125), "+12.5 pp");
        assert_eq!(delta("eval/pass@1", -0.05), "−5.0 pp");
        assert_eq!(delta_ci("eval/pass@1", -0.05, 0.3), "[−5.0, +30.0]");
        assert_eq!(p(0.332_306), "0.332");
        assert_eq!(p(0.000_686), "6.9e-4");
        assert_eq!(sig(1234.7), "1235");
        assert_eq!(sig(123_456.0), "123,456");
        assert_eq!(sig(0.5), "0.5");
        assert_eq!(duration(677.0), "11m17s");
        assert!(higher_is_better("eval/pass@1") && !higher_is_better("train/loss") && !higher_is_better("time/step_s"));
        assert!(!higher_is_better(train::COMPILE_ERROR_RATE) && !higher_is_better(eval::COMPILE_ERROR_RATE) && is_fraction(train::COMPILE_ERROR_RATE));
        let known: BTreeSet<String> = ["eval/pass@1".to_string(), "train/reward_mean".to_string()].into();
        assert_eq!(suggest("eval/pass@l", &known).as_deref(), Some("eval/pass@1"));
        assert_eq!(defaults(&known), vec!["eval/pass@1", "train/reward_mean"]);
        let tools: BTreeSet<String> = ["eval/pass@1", "train/reward_mean", "train/turns_mean", "train/tool_calls_mean", "train/tool_error_rate", "train/limit_stop_rate", "train/stop_completed", "train/stop_max_turns", "train/loss"].map(String::from).into();
        assert_eq!(defaults(&tools), ["eval/pass@1", "train/reward_mean", "train/turns_mean", "train/tool_calls_mean", "train/tool_error_rate", "train/limit_stop_rate", "train/stop_completed", "train/stop_max_turns"]);
        assert!(!higher_is_better("train/tool_error_rate") && !higher_is_better("train/stop_max_turns") && higher_is_better("train/stop_completed") && is_fraction("train/limit_stop_rate") && is_fraction("train/stop_max_turns"));
    }
}
