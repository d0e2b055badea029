//! Signed download URLs: `GET /files/<token>/<file>` serves one file of an external-weights
//! checkpoint to whoever holds the URL, without an API key, until it expires, as Tinker's
//! signed storage URLs do (the SDK fetches them with a bare `urllib` request).
//!
//! A token is 128 random bits from the operating system, so a URL cannot be guessed; the table
//! maps it to the file and the expiry. Rejected alternative: HMAC-signed `?expires=…&sig=…`
//! query strings (stateless, like a bucket's), which need a secret key kept across restarts for
//! no gain here: URLs are signed again on demand, and models do not survive a restart either.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{Duration, SystemTime};

/// The path prefix of signed URLs.
pub(crate) const PREFIX: &str = "/files/";

/// How long an expired token is still told apart from an unknown one (a 403 that says
/// "expired" rather than a 404).
const REMEMBER_EXPIRED: Duration = Duration::from_secs(3600);

/// What a token names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Lookup {
    /// A file, still valid.
    File(PathBuf),
    /// Valid until then, no more.
    Expired(SystemTime),
    /// Never issued, revoked, or long expired.
    Unknown,
}

struct Entry {
    file: PathBuf,
    expires: SystemTime,
}

/// The tokens issued.
#[derive(Default)]
pub(crate) struct Urls {
    /// Never held across an `.await`.
    tokens: Mutex<HashMap<String, Entry>>,
}

impl Urls {
    /// A token for `file`, valid until `expires`.
    ///
    /// # Errors
    /// The operating system has no randomness to give.
    pub(crate) fn sign(&self, file: &Path, expires: SystemTime) -> Result<String, getrandom::Error> {
        let mut bytes = [0u8; 16];
        getrandom::fill(&mut bytes)?;
        let token: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        let mut tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        let now = SystemTime::now();
        tokens.retain(|_, e| e.expires + REMEMBER_EXPIRED > now);
        tokens.insert(token.clone(), Entry { file: file.to_path_buf(), expires });
        Ok(token)
    }

    /// What `token` names now.
    pub(crate) fn lookup(&self, token: &str) -> Lookup {
        let tokens = self.tokens.lock().unwrap_or_else(|e| e.into_inner());
        match tokens.get(token) {
            Some(e) if e.expires > SystemTime::now() => Lookup::File(e.file.clone()),
            Some(e) => Lookup::Expired(e.expires),
            None => Lookup::Unknown,
        }
    }

    /// Revokes every token of a file under `dir` (a deleted checkpoint).
    pub(crate) fn revoke_under(&self, dir: &Path) {
        self.tokens.lock().unwrap_or_else(|e| e.into_inner()).retain(|_, e| !e.file.starts_with(dir));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_random_expire_and_are_revoked() {
        let urls = Urls::default();
        let later = SystemTime::now() + Duration::from_secs(60);
        let a = urls.sign(Path::new("/s/m/external_weights/x/a.json"), later).unwrap();
        let b = urls.sign(Path::new("/s/m/external_weights/x/a.json"), later).unwrap();
        assert_ne!(a, b);
        assert_eq!(a.len(), 32);
        assert_eq!(urls.lookup(&a), Lookup::File(PathBuf::from("/s/m/external_weights/x/a.json")));
        assert_eq!(urls.lookup("0123"), Lookup::Unknown);
        let past = SystemTime::now() - Duration::from_secs(1);
        let c = urls.sign(Path::new("/s/m/external_weights/y/b"), past).unwrap();
        assert_eq!(urls.lookup(&c), Lookup::Expired(past));
        urls.revoke_under(Path::new("/s/m/external_weights/x"));
        assert_eq!(urls.lookup(&a), Lookup::Unknown);
        assert_eq!(urls.lookup(&c), Lookup::Expired(past));
    }
}
