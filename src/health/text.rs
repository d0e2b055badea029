//! How the signals and the smoke test print numbers: rates as percentages, other values to four
//! significant digits, p-values as `compare` prints them. One file, so a check, the smoke test
//! and the eval checks cannot disagree (evals.rs kept its own `pct` while it could not name a
//! sibling without growing `health`'s import cycle).

/// A rate as a percentage, `37.5%`.
pub(crate) fn pct(x: f64) -> String {
    format!("{:.1}%", 100.0 * x)
}

/// A number with four significant digits.
pub(crate) fn fmt(x: f64) -> String {
    if x == 0.0 || !x.is_finite() {
        return x.to_string();
    }
    let digits = (3 - x.abs().log10().floor() as i32).max(0) as usize;
    format!("{x:.digits$}")
}

/// A p-value as `compare` prints it: 3 decimals, or scientific below 0.001.
pub(crate) fn p_text(p: f64) -> String {
    if p < 0.001 { format!("{p:.1e}") } else { format!("{p:.3}") }
}
