//! Parquet files as JSON rows, so parquet datasets go through the same format adapters as JSONL.
//!
//! Hugging Face stores most datasets (DeepCoder-Preview, TACO, the auto-converted
//! `refs/convert/parquet` branch) as parquet. polars reads the file into a `DataFrame`; each row
//! becomes a `serde_json` object keyed by column name in column order. Strings, numbers, booleans
//! and nulls map directly; lists become arrays and structs objects (recursively); dates and
//! date-times become ISO-8601 text (`2024-08-01`, `2024-08-01T00:00:00`) so the date filters see
//! the same values as in a JSONL copy; binary columns become text (lossy UTF-8).
//!
//! polars is behind the default `parquet` cargo feature (it is the largest build cost in the tree);
//! without it [`read_rows`] returns [`Error::Disabled`].

use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// One row, as the format adapters take it.
pub(crate) type Row = Map<String, Value>;

/// Why a parquet file could not be turned into rows.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The file could not be opened.
    #[error("cannot open `{}`", path.display())]
    Open {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// polars could not read it (not parquet, truncated, unsupported column type).
    #[cfg(feature = "parquet")]
    #[error("`{}` is not a readable parquet file", path.display())]
    Parquet {
        /// The file.
        path: PathBuf,
        /// polars' error.
        #[source]
        source: polars::error::PolarsError,
    },
    /// polars panicked on the file. Some of its readers assert on malformed input instead of
    /// returning an error; the panic is caught so a bad file is an error, not a crash.
    #[error("`{}`: the parquet reader failed on this file ({message})", path.display())]
    Panicked {
        /// The file.
        path: PathBuf,
        /// The panic message.
        message: String,
    },
    /// rlx was built without the `parquet` feature.
    #[error("`{}` is parquet, but this rlx was built without the `parquet` feature", path.display())]
    Disabled {
        /// The file.
        path: PathBuf,
    },
}

impl Error {
    /// Whether the user can fix it (exit code 2): always, since every variant is a file the user
    /// named that cannot be read as parquet (or a build without parquet support).
    pub fn is_user_error(&self) -> bool {
        true
    }
}

/// Read every row of a parquet file.
///
/// # Errors
/// [`Error::Open`], [`Error::Parquet`], [`Error::Panicked`], or [`Error::Disabled`] without the
/// `parquet` feature.
#[cfg(feature = "parquet")]
pub(crate) fn read_rows(path: &Path) -> Result<Vec<Row>, Error> {
    use polars::prelude::{ParquetReader, SerReader};

    let file = std::fs::File::open(path).map_err(|source| Error::Open { path: path.to_owned(), source })?;
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| -> Result<Vec<Row>, polars::error::PolarsError> {
        let df = ParquetReader::new(file).finish()?;
        let height = df.height();
        let mut rows: Vec<Row> = (0..height).map(|_| Map::new()).collect();
        for column in df.columns() {
            let name = column.name().to_string();
            for (i, row) in rows.iter_mut().enumerate() {
                row.insert(name.clone(), json(&column.get(i)?));
            }
        }
        Ok(rows)
    }));
    match result {
        Ok(Ok(rows)) => Ok(rows),
        Ok(Err(source)) => Err(Error::Parquet { path: path.to_owned(), source }),
        Err(panic) => {
            let message = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_else(|| "panic".into());
            Err(Error::Panicked { path: path.to_owned(), message })
        }
    }
}

/// Without polars, parquet sources are an error that says how to get them.
#[cfg(not(feature = "parquet"))]
pub fn read_rows(path: &Path) -> Result<Vec<Row>, Error> {
    Err(Error::Disabled { path: path.to_owned() })
}

#[cfg(feature = "parquet")]
fn json(v: &polars::prelude::AnyValue<'_>) -> Value {
    use polars::prelude::{AnyValue, TimeUnit};

    fn number(f: f64) -> Value {
        serde_json::Number::from_f64(f).map_or(Value::Null, Value::Number)
    }
    match v {
        AnyValue::Null => Value::Null,
        AnyValue::Boolean(b) => Value::Bool(*b),
        AnyValue::String(s) => Value::String((*s).to_owned()),
        AnyValue::StringOwned(s) => Value::String(s.to_string()),
        AnyValue::UInt8(n) => (*n).into(),
        AnyValue::UInt16(n) => (*n).into(),
        AnyValue::UInt32(n) => (*n).into(),
        AnyValue::UInt64(n) => (*n).into(),
        AnyValue::Int8(n) => (*n).into(),
        AnyValue::Int16(n) => (*n).into(),
        AnyValue::Int32(n) => (*n).into(),
        AnyValue::Int64(n) => (*n).into(),
        AnyValue::Float32(f) => number(f64::from(*f)),
        AnyValue::Float64(f) => number(*f),
        AnyValue::Binary(b) => bytes(b),
        AnyValue::BinaryOwned(b) => bytes(b),
        AnyValue::List(s) => Value::Array(s.iter().map(|x| json(&x)).collect()),
        AnyValue::Struct(_, _, fields) => {
            let mut obj = Map::new();
            for (field, value) in fields.iter().zip(v._iter_struct_av()) {
                obj.insert(field.name().to_string(), json(&value));
            }
            Value::Object(obj)
        }
        AnyValue::StructOwned(payload) => {
            let (values, fields) = &**payload;
            Value::Object(fields.iter().zip(values).map(|(f, x)| (f.name().to_string(), json(x))).collect())
        }
        AnyValue::Date(days) => Value::String(date_text(i64::from(*days))),
        AnyValue::Datetime(t, unit, _) | AnyValue::DatetimeOwned(t, unit, _) => {
            let per_second: i64 = match unit {
                TimeUnit::Nanoseconds => 1_000_000_000,
                TimeUnit::Microseconds => 1_000_000,
                TimeUnit::Milliseconds => 1_000,
            };
            let secs = t.div_euclid(per_second);
            let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
            Value::String(format!("{}T{:02}:{:02}:{:02}", date_text(days), rem / 3600, rem % 3600 / 60, rem % 60))
        }
        other => Value::String(other.str_value().into_owned()),
    }
}

#[cfg(feature = "parquet")]
fn bytes(b: &[u8]) -> Value {
    Value::String(String::from_utf8_lossy(b).into_owned())
}

/// Days since 1970-01-01 as `YYYY-MM-DD`.
#[cfg_attr(not(feature = "parquet"), allow(dead_code))]
fn date_text(days: i64) -> String {
    let (y, m, d) = crate::calendar::civil_from_days(days);
    format!("{y:04}-{m:02}-{d:02}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn civil_dates() {
        assert_eq!(date_text(0), "1970-01-01");
        assert_eq!(date_text(19_936), "2024-08-01");
        assert_eq!(date_text(-1), "1969-12-31");
        assert_eq!(date_text(11_016), "2000-02-29");
    }
}
