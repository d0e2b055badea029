//! The sandbox's error: what failed when a program could not be judged.

/// Sandbox failures: always infrastructure, never the program's fault.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No Python interpreter could be started.
    #[error("cannot start the Python interpreter `{python}`")]
    Python {
        /// The interpreter tried.
        python: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// A worker failed to start or died; `stderr` is its last words.
    #[error("sandbox worker {slot} failed: {reason}{}", if stderr.is_empty() { String::new() } else { format!("; its stderr: {stderr}") })]
    Worker {
        /// Worker slot.
        slot: usize,
        /// What happened.
        reason: String,
        /// The end of the worker's stderr.
        stderr: String,
    },
    /// `strict` was asked for and a layer is missing.
    #[error("sandbox isolation incomplete: {}", missing.join("; "))]
    Incomplete {
        /// The missing layers.
        missing: Vec<String>,
    },
    /// The harness refused the request (for example a file path leaving the working directory).
    #[error("sandbox rejected the request: {0}")]
    Rejected(String),
    /// I/O on the sandbox's own files.
    #[error("sandbox I/O on `{path}`")]
    Io {
        /// The path.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// A completion names a problem that the problem file does not have.
    #[error("completion {index} names problem `{id}`, which is not in the problem file")]
    UnknownProblem {
        /// 0-based completion index.
        index: usize,
        /// The id.
        id: String,
    },
    /// A grading task panicked or was cancelled.
    #[error("grading task failed: {0}")]
    Task(String),
    /// The Sandbox Fusion URL cannot be used (not `http://`, not a URL).
    #[error("invalid sandbox URL `{url}`: {reason}")]
    Url {
        /// The URL as given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The check before a run's first sample failed: the sandbox cannot grade.
    #[error("{sandbox} cannot grade: {reason}")]
    Preflight {
        /// Which sandbox, and the setting that names it.
        sandbox: String,
        /// What failed.
        reason: String,
        /// What to do (the CLI prints it as a `help:` line).
        hint: String,
    },
    /// A language's compiler is not installed: the machine cannot grade that language.
    #[error("{language} needs the compiler `{compiler}`, which is not installed (looked in {searched})")]
    Toolchain {
        /// The language.
        language: String,
        /// The compiler's name.
        compiler: String,
        /// Where it was looked for.
        searched: String,
    },
    /// A remote sandbox failed (transport error, 5xx, SandboxError), after retries.
    #[error("remote sandbox failed after {attempts} attempt(s): {reason}")]
    Remote {
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        reason: String,
    },
}

impl Error {
    /// Whether the user can fix it by changing the spec or the arguments (exit code 2): a strict
    /// sandbox on a machine without some isolation layer, a bad URL or one where no Sandbox
    /// Fusion answers, a completion for an unknown problem. Everything else is the sandbox failing (exit code 3).
    pub fn is_user_error(&self) -> bool {
        matches!(self, Error::Incomplete { .. } | Error::Url { .. } | Error::UnknownProblem { .. } | Error::Toolchain { .. })
            || matches!(self, Error::Preflight { sandbox, .. } if sandbox.starts_with("Sandbox Fusion") || sandbox.starts_with("CoreWeave Sandbox"))
    }
}

