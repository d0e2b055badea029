//! [`UserError`]: a problem with the user's input that only a command can see (exit code 2).

/// A problem with the user's input that a command finds itself (a flag value out of range, a
/// malformed line of an input file): exit code 2. Library errors carry their own verdict
/// ([`super::exit::for_error`]); this is for what only the command knows.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct UserError {
    /// What is wrong, naming the flag or the file and line.
    message: String,
    /// The underlying error (a JSON parse error, ...), printed as a `Caused by:` line.
    #[source]
    source: Option<Box<dyn std::error::Error + Send + Sync + 'static>>,
}

impl UserError {
    /// A user error with this message.
    pub fn msg(message: impl Into<String>) -> anyhow::Error {
        anyhow::Error::new(UserError { message: message.into(), source: None })
    }

    /// A user error with this message, caused by `source`.
    pub fn with_source(message: impl Into<String>, source: impl std::error::Error + Send + Sync + 'static) -> anyhow::Error {
        anyhow::Error::new(UserError { message: message.into(), source: Some(Box::new(source)) })
    }
}
