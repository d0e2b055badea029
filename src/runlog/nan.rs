//! Non-finite floats in JSON. JSON has no NaN: serde_json writes a non-finite `f64` as `null`
//! (both when serialising an `f64` and when building a `Value` from one), so a metric that came
//! out NaN (a ratio over zero tokens) is `null` on disk. Readers take `null` back as NaN instead
//! of rejecting the whole line; infinities come back as NaN too, which loses only the sign.

use serde::{Deserialize, Deserializer};

/// Deserialises a number, or `null` as NaN.
///
/// # Errors
/// When the value is neither a number nor `null`.
pub(crate) fn f64_or_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}
