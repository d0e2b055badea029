//! candle's errors as the seam's: the backend's [`Error`] names no tensor library (the HTTP
//! backends have none), so the local backend, the one user of candle, converts here.

use crate::backend::error::Error;

/// Tensor failures become the seam's error with the candle error as its cause (`causes` still
/// finds it there to word it).
impl From<candle_core::Error> for Error {
    fn from(e: candle_core::Error) -> Self {
        Error::Tensor(Box::new(e))
    }
}
