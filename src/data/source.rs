//! Spec data sources to problems: reading a source (local `.jsonl`/`.json`/`.parquet`, or an
//! `hf://` dataset), converting its rows with the format adapters, applying its filters, and
//! fingerprinting the result; [`load_data`] does this for every source of `data.train` and
//! `data.eval` and shuffles the training set with the spec seed.
//!
//! Row ids: rows without an id field get `<stem>/<row>`, where the stem is the file stem for local
//! files (the same ids `rlx grade` shows) and `name[/config]/split` for `hf://` sources, with rows
//! numbered across all shards of the split, so ids do not depend on how the Hub sharded the data.

use std::path::{Path, PathBuf};

use serde::Serialize;

use super::filter::{self, Stats};
use super::formats::{self, Format};
use super::{META_CHECKER, META_COMPILE_FLAGS, META_COMPILE_TIMEOUT, META_LANGUAGE, Problem, hf, parquet};
use crate::spec::types::{Data, DataFormat, Language, Source};

/// Environment-dependent settings for loading (today: the Hugging Face cache and network policy).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Options {
    /// Where `hf://` sources are cached and whether they may be downloaded.
    pub hf: hf::Options,
}

impl Options {
    /// Options from the process environment (`HF_HOME`, `HF_HUB_CACHE`, `HF_HUB_OFFLINE`, ...;
    /// see [`crate::hub`]).
    pub fn from_env() -> Options {
        Options { hf: hf::Options::from_env(hf::RepoKind::Dataset) }
    }
}

/// One source, loaded and filtered.
#[derive(Debug, Clone)]
pub struct Loaded {
    /// The problems kept, in source order.
    pub problems: Vec<Problem>,
    /// [`filter::fingerprint`] of `problems`.
    pub fingerprint: String,
    /// Where they came from.
    pub origin: Origin,
    /// What the filters did.
    pub stats: Stats,
}

/// Where a source's rows were read from, for provenance.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Origin {
    /// The source's `path` as in the spec (absolute for local files after planning).
    pub path: String,
    /// The files read, in order (inside the Hugging Face cache for `hf://` sources).
    pub files: Vec<PathBuf>,
    /// The dataset commit, for `hf://` sources.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub revision: Option<String>,
}

/// Why a source could not be loaded. Every variant names the source or the file.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A local path whose extension is not a dataset format.
    #[error("dataset `{}`: unsupported file type; expected .jsonl, .json or .parquet", path.display())]
    Extension {
        /// The file.
        path: PathBuf,
    },
    /// A local path that is not a file.
    #[error("dataset `{}` does not exist", path.display())]
    Missing {
        /// The file.
        path: PathBuf,
    },
    /// Reading or converting a JSON/JSONL file or a row (names the file, line or row).
    #[error(transparent)]
    File(#[from] super::Error),
    /// Reading a parquet file.
    #[error(transparent)]
    Parquet(#[from] parquet::Error),
    /// Resolving an `hf://` source.
    #[error(transparent)]
    Hub(#[from] hf::Error),
    /// The source's filters failed or kept nothing.
    #[error("filters of dataset `{path}`")]
    Filter {
        /// The source's `path`.
        path: String,
        /// What went wrong.
        #[source]
        source: filter::Error,
    },
    /// A problem whose tests only a Python program can pass (functional calls, asserts) in a
    /// source that asks for another language.
    #[error("dataset `{path}`: problem `{id}` has {kind} tests, which only Python can pass, but the source's `language` is `{language}`; only stdin/stdout problems can be solved in another language")]
    Language {
        /// The source's `path`.
        path: String,
        /// The first such problem.
        id: String,
        /// Its kind of tests.
        kind: &'static str,
        /// The source's language.
        language: Language,
    },
}

impl Error {
    /// Whether the user can fix it by changing the spec or the data (exit code 2) rather than it
    /// being a failure of rlx or of the network (exit code 3).
    pub fn is_user_error(&self) -> bool {
        match self {
            Error::Extension { .. } | Error::Missing { .. } | Error::Filter { .. } | Error::Language { .. } => true,
            Error::File(e) => e.is_user_error(),
            Error::Parquet(e) => e.is_user_error(),
            Error::Hub(e) => e.is_user_error(),
        }
    }
}

/// The adapter a spec format selects; `None` detects each row's format.
pub fn adapter(format: DataFormat) -> Option<Format> {
    match format {
        DataFormat::Auto => None,
        DataFormat::Lcb | DataFormat::Lcbv5 => Some(Format::Lcb),
        DataFormat::Primeintellect => Some(Format::PrimeIntellect),
        DataFormat::Taco => Some(Format::Taco),
        DataFormat::Codeforces => Some(Format::Codeforces),
        DataFormat::Mbpp => Some(Format::Mbpp),
        DataFormat::Humaneval => Some(Format::HumanEval),
    }
}

/// Load one source: read it, convert its rows, apply its filters, fingerprint the result.
///
/// # Errors
/// See [`Error`].
pub fn load_source(source: &Source, opts: &Options) -> Result<Loaded, Error> {
    let format = adapter(source.format);
    let (problems, origin) = if source.path.starts_with("hf://") {
        let uri = hf::Uri::parse(&source.path)?;
        let resolved = hf::resolve(&uri, &opts.hf)?;
        tracing::debug!(%uri, revision = %resolved.revision, files = ?resolved.repo_files, cached = resolved.from_cache, "dataset resolved");
        let mut problems = Vec::new();
        let stem = uri.id_stem();
        for file in &resolved.files {
            let rows = read_rows(file)?;
            let offset = problems.len();
            problems.extend(to_problems(file, &rows, format, &stem, offset)?);
        }
        (problems, Origin { path: source.path.clone(), files: resolved.files, revision: Some(resolved.revision) })
    } else {
        let path = PathBuf::from(&source.path);
        let problems = load_local(&path, format)?;
        (problems, Origin { path: source.path.clone(), files: vec![path], revision: None })
    };
    let (mut problems, stats) =
        filter::apply(problems, source).map_err(|e| Error::Filter { path: source.path.clone(), source: e })?;
    stamp_language(&mut problems, source)?;
    let fingerprint = filter::fingerprint(&problems);
    Ok(Loaded { problems, fingerprint, origin, stats })
}

/// Writes the source's `language`, `compile_flags`, `compile_timeout_s` and `checker` into each
/// problem's metadata (where the prompt and the sandbox read them, see [`Problem::language`]);
/// a problem that names its own checker keeps it. Python, the default, leaves no trace, so the
/// fingerprints of Python sources do not change.
fn stamp_language(problems: &mut [Problem], source: &Source) -> Result<(), Error> {
    let language = source.language.unwrap_or_default();
    for p in problems.iter_mut() {
        if language != Language::Python {
            let kind = match p.tests {
                crate::data::Tests::Stdin { .. } => None,
                crate::data::Tests::Functional { .. } => Some("functional"),
                crate::data::Tests::Asserts { .. } => Some("assert"),
                crate::data::Tests::Check { .. } => Some("HumanEval check"),
            };
            if let Some(kind) = kind {
                return Err(Error::Language { path: source.path.clone(), id: p.id.clone(), kind, language });
            }
            p.metadata.insert(META_LANGUAGE.into(), language.name().into());
        }
        if let Some(flags) = &source.compile_flags {
            p.metadata.insert(META_COMPILE_FLAGS.into(), flags.clone().into());
        }
        if let Some(t) = source.compile_timeout_s {
            p.metadata.insert(META_COMPILE_TIMEOUT.into(), t.into());
        }
        if let Some(c) = source.checker {
            p.metadata.entry(META_CHECKER).or_insert_with(|| c.name().into());
        }
        if let Some(rl) = &source.row_limits {
            row_limits(&mut p.metadata, rl);
        }
    }
    Ok(())
}

/// Scales and caps (or drops) the limits a problem's row carried, as `data.*.row_limits` says.
fn row_limits(meta: &mut serde_json::Map<String, serde_json::Value>, rl: &crate::spec::types::RowLimits) {
    use crate::data::{META_MEMORY_LIMIT, META_TIME_LIMIT};
    if rl.ignore {
        meta.remove(META_TIME_LIMIT);
        meta.remove(META_MEMORY_LIMIT);
        return;
    }
    if let Some(t) = meta.get(META_TIME_LIMIT).and_then(serde_json::Value::as_f64) {
        let t = t * rl.time_scale.unwrap_or(1.0);
        meta.insert(META_TIME_LIMIT.into(), rl.time_max_s.map_or(t, |m| t.min(m)).into());
    }
    if let (Some(m), Some(max)) = (meta.get(META_MEMORY_LIMIT).and_then(serde_json::Value::as_u64), rl.memory_max_mb) {
        meta.insert(META_MEMORY_LIMIT.into(), m.min(max).into());
    }
}

/// Load a local `.jsonl`, `.json` or `.parquet` file (no filters).
///
/// # Errors
/// [`Error::Missing`], [`Error::Extension`], [`Error::File`], [`Error::Parquet`].
pub fn load_local(path: &Path, format: Option<Format>) -> Result<Vec<Problem>, Error> {
    if !path.is_file() {
        return Err(Error::Missing { path: path.to_owned() });
    }
    match extension(path) {
        Some("parquet") => {
            let rows = parquet::read_rows(path)?;
            let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or("problems");
            to_problems(path, &rows, format, stem, 0)
        }
        Some("json" | "jsonl") => Ok(super::load_file(path, format)?),
        _ => Err(Error::Extension { path: path.to_owned() }),
    }
}

fn extension(path: &Path) -> Option<&str> {
    path.extension().and_then(|e| e.to_str())
}

fn read_rows(path: &Path) -> Result<Vec<parquet::Row>, Error> {
    match extension(path) {
        Some("parquet") => Ok(parquet::read_rows(path)?),
        Some("json" | "jsonl") => {
            let text = std::fs::read_to_string(path).map_err(|source| super::Error::Read { path: path.to_owned(), source })?;
            Ok(super::parse_rows(path, &text)?)
        }
        _ => Err(Error::Extension { path: path.to_owned() }),
    }
}

/// Convert rows read from `path`; ids of rows without one are `<stem>/<offset + row>`, errors
/// name `path` and the row's index within it.
fn to_problems(
    path: &Path,
    rows: &[parquet::Row],
    format: Option<Format>,
    stem: &str,
    offset: usize,
) -> Result<Vec<Problem>, Error> {
    rows.iter()
        .enumerate()
        .map(|(i, row)| {
            formats::to_problem(row, format, stem, offset + i)
                .map_err(|reason| Error::File(super::Error::Row { path: path.to_owned(), row: i, reason }))
        })
        .collect()
}

/// The problems of one split of the spec (`train` or `eval`), in the order they are used.
#[derive(Debug, Clone)]
pub struct Set {
    /// The problems: sources concatenated in spec order, then shuffled for `train` when
    /// `data.shuffle` is set.
    pub problems: Vec<Problem>,
    /// [`filter::fingerprint`] of `problems` in this final order; this is the number provenance
    /// records as "what the run trained on".
    pub fingerprint: String,
    /// Each source's origin, statistics and own fingerprint (before the shuffle).
    pub sources: Vec<SourceSummary>,
}

/// Provenance of one loaded source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SourceSummary {
    /// Where the rows came from.
    pub origin: Origin,
    /// What the filters did.
    pub stats: Stats,
    /// Fingerprint of the source's problems after its filters.
    pub fingerprint: String,
}

/// Training and evaluation problems of a spec.
#[derive(Debug, Clone)]
pub struct Dataset {
    /// `data.train`.
    pub train: Set,
    /// `data.eval` (empty when the spec has none; never shuffled).
    pub eval: Set,
}

/// Load every source of `data`. Training sources are concatenated in spec order and, when
/// `data.shuffle` is set, shuffled once with [`filter::shuffle`] and `seed`; evaluation sources
/// keep their order.
///
/// # Errors
/// The first source that fails, as [`load_source`] reports it.
pub fn load_data(data: &Data, seed: u64, opts: &Options) -> Result<Dataset, Error> {
    let mut train = load_set(&data.train, opts)?;
    if data.shuffle {
        filter::shuffle(&mut train.problems, seed);
        train.fingerprint = filter::fingerprint(&train.problems);
    }
    let eval = load_set(&data.eval, opts)?;
    Ok(Dataset { train, eval })
}

fn load_set(sources: &[Source], opts: &Options) -> Result<Set, Error> {
    let mut problems = Vec::new();
    let mut summaries = Vec::with_capacity(sources.len());
    for source in sources {
        let loaded = load_source(source, opts)?;
        problems.extend(loaded.problems);
        summaries.push(SourceSummary { origin: loaded.origin, stats: loaded.stats, fingerprint: loaded.fingerprint });
    }
    let fingerprint = filter::fingerprint(&problems);
    Ok(Set { problems, fingerprint, sources: summaries })
}
