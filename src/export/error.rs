//! [`Error`]: why an export (or finding a checkpoint) failed.

use std::path::PathBuf;

/// Errors of `rlx export` and of locating a checkpoint.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The path is neither a run directory nor a checkpoint directory.
    #[error("`{path}` is neither a run directory (no `status.json`) nor a checkpoint directory (no `state.json`)")]
    NotACheckpoint {
        /// What was given.
        path: PathBuf,
    },
    /// The run saved no checkpoint (or their directories are gone).
    #[error("run `{run}` has no checkpoint")]
    NoCheckpoints {
        /// The run directory.
        run: PathBuf,
        /// Why: none recorded, or recorded but deleted.
        detail: String,
    },
    /// `RUN_DIR@best` of a run with no evaluation at a checkpointed step.
    #[error("run `{run}` has no evaluation at a step it kept a checkpoint of, so `@best` names none")]
    NoBest {
        /// The run directory.
        run: PathBuf,
        /// The steps it has checkpoints of.
        checkpoints: Vec<u32>,
    },
    /// `RUN_DIR@STEP` names a step the run has no checkpoint of.
    #[error("run `{run}` has no checkpoint at step `{step}`")]
    NoStep {
        /// The run directory.
        run: PathBuf,
        /// The step as written.
        step: String,
        /// The steps it has checkpoints of.
        available: Vec<u32>,
    },
    /// The output directory exists and is not empty (or is a file).
    #[error("the output `{path}` exists and is not an empty directory")]
    OutNotEmpty {
        /// The output path.
        path: PathBuf,
    },
    /// The checkpoint lives on a remote service.
    #[error("the checkpoint `{state}` is on a remote service; `rlx export` reads local checkpoints and Tinker's (`tinker://`)")]
    Remote {
        /// The state reference.
        state: String,
    },
    /// A Tinker sampler checkpoint: the service offers no download of those.
    #[error("`{path}` is a sampler checkpoint, and Tinker has no download of sampler checkpoints (SDK 0.38's `tinker checkpoint download` refuses them too)")]
    SamplerPath {
        /// The path given.
        path: String,
        /// The training checkpoint of the same name.
        state: String,
    },
    /// The service does not know the checkpoint (HTTP 404).
    #[error("Tinker has no checkpoint `{path}`")]
    UnknownCheckpoint {
        /// The path given.
        path: String,
        /// The service's words.
        detail: String,
    },
    /// A signed download URL stopped working before its file was fetched, even after signing
    /// again.
    #[error("the signed download URL of `{file}` expired before it was fetched (the service signed it until {expires})")]
    UrlExpired {
        /// The file.
        file: String,
        /// When the URLs expired, as the service said.
        expires: String,
    },
    /// The base model a downloaded adapter is merged into cannot be found.
    #[error("cannot find the base model `{name}` to merge the downloaded adapter into")]
    NoBase {
        /// The name or path tried.
        name: String,
        /// Why.
        reason: String,
    },
    /// The service's files are not what a download should give.
    #[error("the files Tinker gave for `{path}` cannot be exported: {reason}")]
    BadDownload {
        /// The checkpoint.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// Talking to Tinker failed.
    #[error(transparent)]
    Tinker(#[from] crate::backend::tinker::Error),
    /// A flag combination that cannot be honoured (already phrased for the user).
    #[error("{0}")]
    Usage(String),
    /// The run directory could not be read.
    #[error("cannot read the run directory")]
    Run(#[from] crate::runlog::Error),
    /// The base model or the saved state could not be read, or they do not fit together.
    #[error(transparent)]
    Model(#[from] crate::backend::Error),
    /// A tensor operation failed.
    #[error("tensor operation failed")]
    Tensor(#[from] candle_core::Error),
    /// A file could not be read or written.
    #[error("cannot {action} `{path}`")]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Error {
    /// Whether the user can fix it (exit code 2): bad input rather than a failure of rlx.
    pub(crate) fn is_user_error(&self) -> bool {
        match self {
            Error::NotACheckpoint { .. }
            | Error::NoCheckpoints { .. }
            | Error::NoBest { .. }
            | Error::NoStep { .. }
            | Error::OutNotEmpty { .. }
            | Error::Remote { .. }
            | Error::Usage(_)
            | Error::SamplerPath { .. }
            | Error::UnknownCheckpoint { .. }
            | Error::UrlExpired { .. }
            | Error::NoBase { .. } => true,
            Error::Tinker(e) => e.is_user_error(),
            Error::BadDownload { .. } => false,
            Error::Run(e) => e.is_user_error(),
            Error::Model(e) => e.is_user_error(),
            Error::Io { source, .. } => source.kind() == std::io::ErrorKind::NotFound,
            Error::Tensor(_) => false,
        }
    }

    /// What to do about it, as `hint:` lines.
    pub(crate) fn hints(&self) -> Vec<String> {
        match self {
            Error::NoCheckpoints { detail, .. } => vec![detail.clone(), "a run saves checkpoints every `schedule.save_every` steps and at its end".into()],
            Error::NoStep { available, run, .. } if available.is_empty() => vec![format!("`{}` has no checkpoint at all", run.display())],
            Error::NoStep { available, run, .. } => {
                let list: Vec<String> = available.iter().map(u32::to_string).collect();
                vec![format!("checkpoints exist at steps {}: e.g. `{}@{}`", list.join(", "), run.display(), available[available.len() - 1])]
            }
            Error::NoBest { checkpoints, run } => {
                let list: Vec<String> = checkpoints.iter().map(u32::to_string).collect();
                vec![
                    format!("checkpoints exist at steps {}; evaluations run every `schedule.eval_every` steps", list.join(", ")),
                    format!("name a step instead: `{}@{}`", run.display(), checkpoints.last().copied().unwrap_or_default()),
                ]
            }
            Error::OutNotEmpty { .. } => vec!["choose a new directory with `--out`, or remove this one".into()],
            Error::SamplerPath { state, .. } => vec![
                format!("export the training checkpoint saved with it, `{state}` (what `rlx run` records on Tinker): rlx downloads it through `save_weights_external`, as `tinker checkpoint download` does"),
                "or an `external_weights/` path that `save_weights_external` returned".into(),
            ],
            Error::UnknownCheckpoint { detail, .. } => vec![format!("the service says: {detail}"), "list a run's checkpoints with `tinker checkpoint list --run-id RUN_ID`".into()],
            Error::UrlExpired { .. } => vec!["run the export again: the service signs download URLs for a limited time".into()],
            Error::NoBase { reason, .. } => vec![reason.clone(), "name the base model's files with `--base PATH` (or a Hugging Face id), or export the adapter alone with `--adapter-only`".into()],
            Error::NotACheckpoint { .. } => vec!["pass `runs/<run-id>`, `runs/<run-id>@STEP` or `runs/<run-id>/checkpoints/step-000011`".into()],
            _ => vec![],
        }
    }
}
