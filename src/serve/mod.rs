//! `rlx serve`: Tinker's REST protocol over the embedded trainer, complete enough for the official
//! Python SDK (`tinker==0.38.0`) and for rlx's own Tinker backend to drive it
//! (the protocol of the `tinker` SDK 0.38.0 (https://github.com/thinking-machines-lab/tinker); docs/backends.md lists what is served).
//!
//! - [`routes`]: HTTP in and out (hyper 1, as the sandbox server), one handler per endpoint;
//!   [`reply`]: the answer and error shapes they share.
//! - [`checkpoints`]: the REST endpoints over checkpoints (listing, TTL, delete, the download URLs
//!   of external weights) and [`signed`], the URLs' tokens.
//! - [`futures`]: request ids, results, deduplication of resubmitted requests.
//! - [`sessions`]: client sessions and sampling sessions.
//! - [`models`]: the served base model and the training models (one local trainer each, fed in
//!   `seq_id` order).
//! - [`faults`]: injected latency, 429s, 5xx, dropped connections, `try_again` storms.
//! - [`record`]: the JSONL request record (`--record`).
//!
//! The trainer is reached only through the [`crate::backend::Trainer`]/[`crate::backend::Sampler`]
//! seams (`backend::local` handles); the wire types are [`crate::tinker`]'s, shared with the
//! client.

pub(crate) mod checkpoints;
pub(crate) mod faults;
pub(crate) mod futures;
pub(crate) mod models;
pub(crate) mod record;
pub(crate) mod reply;
pub(crate) mod routes;
pub(crate) mod sessions;
pub(crate) mod signed;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub(crate) use routes::serve;

/// What `rlx serve` is started with.
#[derive(Debug, Clone)]
pub(crate) struct Options {
    /// The located base model (GGUF file or HF directory).
    pub model: PathBuf,
    /// Names clients may use for it as `base_model` (at least one).
    pub names: Vec<String>,
    /// Checkpoints (`tinker://` paths), the tokenizer directory.
    pub state_dir: PathBuf,
    /// JSONL request record.
    pub record: Option<PathBuf>,
    /// Injected faults.
    pub faults: faults::Faults,
    /// Required `X-API-Key` (or `Authorization: Bearer`), if any.
    pub api_key: Option<crate::http_server::ApiKey>,
    /// Threads for candle's kernels.
    pub threads: Option<usize>,
    /// How long `retrieve_future` holds a poll before answering `try_again` (below the SDK's
    /// 45 s read timeout).
    pub long_poll: Duration,
    /// How long a signed download URL works.
    pub signed_url_ttl: Duration,
}

/// Everything the handlers share.
pub(crate) struct State {
    /// Base and training models.
    pub registry: models::Registry,
    /// Sessions and sampling sessions.
    pub sessions: sessions::Sessions,
    /// Request results.
    pub futures: futures::Store,
    /// Fault injection.
    pub faults: faults::Injector,
    /// The request record.
    pub record: Option<record::Recorder>,
    /// Required `X-API-Key` (or `Authorization: Bearer`).
    pub api_key: Option<crate::http_server::ApiKey>,
    /// `retrieve_future` hold time.
    pub long_poll: Duration,
    /// Signed download URLs issued.
    pub signed: signed::Urls,
    /// How long a signed URL works.
    pub url_ttl: Duration,
}

/// Why the server cannot start.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Error {
    /// The model's files.
    #[error(transparent)]
    Model(#[from] crate::backend::Error),
    /// The state directory or record file.
    #[error("cannot create `{path}`")]
    Io {
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

impl State {
    /// Prepares the state directory (tokenizer directory), the record file and the registries.
    ///
    /// # Errors
    /// Unreadable model files, an unwritable state directory or record file.
    pub(crate) fn new(o: Options) -> Result<Arc<Self>, Error> {
        std::fs::create_dir_all(&o.state_dir).map_err(|source| Error::Io { path: o.state_dir.clone(), source })?;
        let state_dir = std::path::absolute(&o.state_dir).unwrap_or(o.state_dir.clone());
        let base = models::Base::prepare(o.model, o.names, &state_dir)?;
        let record = o.record.map(|p| record::Recorder::create(&p).map_err(|source| Error::Io { path: p.clone(), source })).transpose()?;
        // Unique per start, so a restarted server issues ids (and model directories) that never
        // collide with an earlier instance's checkpoints.
        let start = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_millis();
        let instance = format!("{start:x}");
        Ok(Arc::new(State {
            registry: models::Registry::new(base, state_dir, o.threads),
            sessions: sessions::Sessions::new(&format!("s{instance}")),
            futures: futures::Store::new(&format!("r{instance}")),
            faults: faults::Injector::new(o.faults),
            record,
            api_key: o.api_key,
            long_poll: o.long_poll,
            signed: signed::Urls::default(),
            url_ttl: o.signed_url_ttl,
        }))
    }
}
