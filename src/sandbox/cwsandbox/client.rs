//! rlx's client of the CoreWeave Sandbox gRPC service: the [`RemoteSandboxes`] seam over
//! `CreateSandbox` (then `GetSandbox` until `RUNNING`), unary `Exec` (the command's deadline is
//! the call's `grpc-timeout`), `WriteFile`, `ReadFile`, `DeleteSandbox` and `ListSandboxes`.
//!
//! Transport: reqwest's HTTP/2 (already built for the Hub and Tinker clients): prior knowledge
//! for `http://` (a local `rlx sandbox serve --protocol cwsandbox`), ALPN over rustls for
//! `https://api.cwsandbox.com`. Auth as the official client: `CWSANDBOX_API_KEY` (or Aviato's
//! `AVIATO_API_KEY`) as a bearer token, else W&B credentials (`WANDB_API_KEY`, with
//! `WANDB_ENTITY_NAME` as the entity). The key is a header value marked sensitive; it is never
//! logged, and errors name only the variable it came from.

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt as _;
use prost::Message;
use reqwest::header::{HeaderMap, HeaderValue};

use super::grpc::{self, Deframer};
use super::wire::{self, State};
use crate::retry::{self, Attempt};
use crate::sandbox::error::Error;
use crate::sandbox::remote::{CreateSpec, Executed, RemoteSandboxes};

/// The official client's default endpoint.
pub const DEFAULT_BASE_URL: &str = "https://api.cwsandbox.com";

/// The variables credentials are read from, in order, for messages.
pub const CREDENTIAL_VARIABLES: &str = "CWSANDBOX_API_KEY, AVIATO_API_KEY, or WANDB_API_KEY (with WANDB_ENTITY_NAME)";

/// Retries of a call that failed in transit or with `UNAVAILABLE`/`RESOURCE_EXHAUSTED`.
const RETRY: retry::Policy = retry::Policy::counted(4, Duration::from_millis(250), Duration::from_secs(4));

/// How long the first contact may take before the run is stopped.
const FIRST_CONTACT: Duration = Duration::from_secs(10);

/// One call's failure.
#[derive(Debug)]
struct CallError {
    /// The gRPC status, `None` for a transport failure.
    code: Option<u32>,
    message: String,
}

impl std::fmt::Display for CallError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.code {
            Some(c) => write!(f, "{} ({c}): {}", grpc::code_name(c), self.message),
            None => write!(f, "transport error: {}", self.message),
        }
    }
}

impl CallError {
    fn retryable(&self) -> bool {
        matches!(self.code, None | Some(grpc::UNAVAILABLE | grpc::RESOURCE_EXHAUSTED | grpc::ABORTED))
    }
}

/// The client.
#[derive(Clone)]
pub struct CwClient {
    http: reqwest::Client,
    base: String,
    auth: HeaderMap,
}

/// Authentication headers from the environment (`var` reads a variable).
///
/// # Errors
/// [`Error::Preflight`] naming the variables when none is set (exit code 2).
pub fn credentials(var: impl Fn(&str) -> Option<String>) -> Result<HeaderMap, Error> {
    let set = |k: &str| var(k).filter(|v| !v.trim().is_empty());
    let mut h = HeaderMap::new();
    let sensitive = |v: &str, from: &str| {
        let mut v = HeaderValue::from_str(v).map_err(|_| missing(&format!("`{from}` holds characters a header cannot carry")))?;
        v.set_sensitive(true);
        Ok::<_, Error>(v)
    };
    if let Some((name, key)) = ["CWSANDBOX_API_KEY", "AVIATO_API_KEY"].iter().find_map(|n| set(n).map(|k| (*n, k))) {
        h.insert("authorization", sensitive(&format!("Bearer {}", key.trim()), name)?);
    } else if let Some(key) = set("WANDB_API_KEY") {
        h.insert("x-wandb-api-key", sensitive(key.trim(), "WANDB_API_KEY")?);
        if let Some(entity) = set("WANDB_ENTITY_NAME").or_else(|| set("WANDB_ENTITY")) {
            h.insert("x-entity-id", sensitive(entity.trim(), "WANDB_ENTITY_NAME")?);
        }
    } else {
        return Err(missing("no credentials are set"));
    }
    Ok(h)
}

fn missing(reason: &str) -> Error {
    Error::Preflight {
        sandbox: "CoreWeave Sandbox (sandbox.kind: cwsandbox)".into(),
        reason: reason.into(),
        hint: format!("set {CREDENTIAL_VARIABLES} in the environment or in .env"),
    }
}

impl CwClient {
    /// A client of `base_url` (`http://` or `https://`, no path) with `auth` headers; connects
    /// on first use.
    ///
    /// # Errors
    /// [`Error::Url`] for a URL that is not `http(s)://host[:port]`.
    pub fn new(base_url: &str, auth: HeaderMap) -> Result<CwClient, Error> {
        let bad = |reason: &str| Error::Url { url: base_url.to_owned(), reason: reason.to_owned() };
        let url = reqwest::Url::parse(base_url).map_err(|e| bad(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(bad("it must be `http://` or `https://` (gRPC over HTTP/2)"));
        }
        if url.path() != "/" || url.host_str().is_none() {
            return Err(bad("it must be `scheme://host[:port]` with no path"));
        }
        let http = reqwest::Client::builder()
            .http2_prior_knowledge()
            .connect_timeout(Duration::from_secs(5))
            .http2_keep_alive_interval(Duration::from_secs(30))
            .build()
            .map_err(|e| bad(&format!("cannot build the HTTP/2 client: {e}")))?;
        Ok(CwClient { http, base: base_url.trim_end_matches('/').to_owned(), auth })
    }

    /// The endpoint, for messages.
    pub fn base_url(&self) -> &str {
        &self.base
    }

    /// One unary call.
    async fn call<Req: Message, Resp: Message + Default>(&self, method: &str, req: &Req, timeout: Duration) -> Result<Resp, CallError> {
        let transport = |e: &(dyn std::error::Error + 'static)| CallError { code: None, message: crate::causes::causes(e).join(": ") };
        let resp = self
            .http
            .post(format!("{}{}{method}", self.base, wire::SERVICE))
            .headers(self.auth.clone())
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .header("grpc-timeout", grpc::format_timeout(timeout))
            .body(grpc::frame(req))
            .timeout(timeout + Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| transport(&e))?;
        let http_status = resp.status();
        let resp: hyper::Response<reqwest::Body> = resp.into();
        let head = resp.headers().clone();
        let collected = resp.into_body().collect().await.map_err(|e| transport(&e))?;
        let trailers = collected.trailers().cloned().unwrap_or_default();
        let body: Bytes = collected.to_bytes();
        // A trailers-only reply carries the status in the headers.
        let field = |k: &str| trailers.get(k).or_else(|| head.get(k)).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let Some(code) = field("grpc-status").and_then(|c| c.parse::<u32>().ok()) else {
            let message = format!("HTTP {http_status} without a gRPC status (is `{}` a CoreWeave Sandbox endpoint?)", self.base);
            let code = if http_status.is_server_error() { Some(grpc::UNAVAILABLE) } else { Some(grpc::INTERNAL) };
            return Err(CallError { code, message });
        };
        if code != grpc::OK {
            return Err(CallError { code: Some(code), message: field("grpc-message").map(|m| grpc::decode_message(&m)).unwrap_or_default() });
        }
        let mut d = Deframer::default();
        d.push(&body);
        let msg = d.next().map_err(|m| CallError { code: Some(grpc::INTERNAL), message: m })?.unwrap_or_default();
        Resp::decode(msg).map_err(|e| CallError { code: Some(grpc::INTERNAL), message: format!("undecodable reply to {method}: {e}") })
    }

    /// A call retried on transient failures.
    async fn retried<Req: Message, Resp: Message + Default>(&self, method: &str, req: &Req, timeout: Duration) -> Result<Resp, Error> {
        retry::run(&RETRY, method, |_| async move {
            match self.call(method, req, timeout).await {
                Ok(r) => Attempt::Done(r),
                Err(e) if e.retryable() => Attempt::Retry(e, None),
                Err(e) => Attempt::Fail(e),
            }
        })
        .await
        .map_err(|g| Error::Remote { attempts: g.attempts, reason: format!("{method} at {}: {}", self.base, g.last) })
    }

    /// The first contact, not retried: a `ListSandboxes` within seconds, so that a wrong URL or
    /// key stops a run before its first sample.
    ///
    /// # Errors
    /// The reason, naming the URL.
    pub(crate) async fn ping(&self) -> Result<(), String> {
        let req = wire::ListSandboxesRequest { page_size: 1, tags: vec!["rlx-ping".into()], ..Default::default() };
        match tokio::time::timeout(FIRST_CONTACT, self.call::<_, wire::ListSandboxesResponse>("ListSandboxes", &req, FIRST_CONTACT)).await {
            Ok(Ok(_)) => Ok(()),
            Ok(Err(e)) => Err(format!("{} did not answer ListSandboxes: {e}", self.base)),
            Err(_) => Err(format!("{} did not answer within {}s", self.base, FIRST_CONTACT.as_secs())),
        }
    }

    async fn wait_running(&self, id: &str, ready_timeout: Duration) -> Result<(), Error> {
        let deadline = tokio::time::Instant::now() + ready_timeout;
        let mut poll = Duration::from_millis(100);
        loop {
            let sb: wire::Sandbox = self.retried("GetSandbox", &wire::GetSandboxRequest { sandbox_id: id.into() }, Duration::from_secs(15)).await?;
            match sb.state() {
                State::Running => return Ok(()),
                s @ (State::Failed | State::Completed | State::Terminated | State::Terminating) => {
                    let reason = sb.status.map(|s| s.state_reason).unwrap_or_default();
                    return Err(Error::Remote { attempts: 1, reason: format!("sandbox {id} at {} ended before it ran ({s:?}) {reason}", self.base) });
                }
                _ => {}
            }
            if tokio::time::Instant::now() + poll > deadline {
                return Err(Error::Remote { attempts: 1, reason: format!("sandbox {id} at {} did not become RUNNING within {}s", self.base, ready_timeout.as_secs_f64()) });
            }
            tokio::time::sleep(poll).await;
            poll = (poll * 3 / 2).min(Duration::from_secs(2));
        }
    }
}

/// Control-plane calls' deadline.
const CALL_TIMEOUT: Duration = Duration::from_secs(60);

impl RemoteSandboxes for CwClient {
    fn describe(&self) -> String {
        format!("CoreWeave Sandbox at {}", self.base)
    }

    async fn create(&self, spec: &CreateSpec) -> Result<String, Error> {
        let limits = wire::Resources { cpu: spec.cpu.clone().unwrap_or_default(), memory: format!("{}Mi", spec.memory_mb) };
        let container = wire::Container {
            image: spec.image.clone(),
            resource_requirements: Some(wire::ResourceRequirements { requests: Some(limits.clone()), limits: Some(limits) }),
            ..Default::default()
        };
        let sandbox = wire::Sandbox {
            spec: Some(wire::SandboxSpec { containers: vec![container], tags: spec.tags.clone(), max_lifetime_seconds: spec.max_lifetime.as_secs() as i32 }),
            ..Default::default()
        };
        // The same request id on every retry: the service creates one sandbox for it.
        let req = wire::CreateSandboxRequest { sandbox: Some(sandbox), request_id: request_id() };
        let created: wire::Sandbox = self.retried("CreateSandbox", &req, CALL_TIMEOUT).await?;
        let id = created.sandbox_id.clone();
        if created.state() != State::Running
            && let Err(e) = self.wait_running(&id, spec.ready_timeout).await
        {
            let _ = self.stop(&id).await;
            return Err(e);
        }
        Ok(id)
    }

    fn exec(&self, id: &str, argv: &[String], timeout: Duration) -> impl Future<Output = Result<Executed, Error>> + Send {
        let req = wire::ExecRequest { sandbox_id: id.into(), command: argv.to_vec(), ..Default::default() };
        async move {
            match self.call::<_, wire::ExecResponse>("Exec", &req, timeout).await {
                Ok(r) => Ok(Executed { stdout: r.stdout, stderr: r.stderr, exit_code: r.exit_code, timed_out: false }),
                Err(CallError { code: Some(grpc::DEADLINE_EXCEEDED), .. }) => Ok(Executed { timed_out: true, ..Executed::default() }),
                Err(e) => Err(Error::Remote { attempts: 1, reason: format!("Exec at {}: {e}", self.base) }),
            }
        }
    }

    fn write_file(&self, id: &str, path: &str, data: Vec<u8>) -> impl Future<Output = Result<(), Error>> + Send {
        let req = wire::WriteFileRequest { sandbox_id: id.into(), path: path.into(), content: data, container: String::new() };
        async move { self.retried::<_, wire::WriteFileResponse>("WriteFile", &req, CALL_TIMEOUT).await.map(drop) }
    }

    fn read_file(&self, id: &str, path: &str) -> impl Future<Output = Result<Vec<u8>, Error>> + Send {
        let req = wire::ReadFileRequest { sandbox_id: id.into(), path: path.into(), container: String::new() };
        async move { self.retried::<_, wire::ReadFileResponse>("ReadFile", &req, CALL_TIMEOUT).await.map(|r| r.content) }
    }

    fn stop(&self, id: &str) -> impl Future<Output = Result<(), Error>> + Send {
        let req = wire::DeleteSandboxRequest { sandbox_id: id.into(), allow_missing: true, request_id: request_id(), ..Default::default() };
        async move {
            match self.call::<_, wire::DeleteSandboxResponse>("DeleteSandbox", &req, CALL_TIMEOUT).await {
                Ok(_) | Err(CallError { code: Some(grpc::NOT_FOUND), .. }) => Ok(()),
                Err(_) => self.retried::<_, wire::DeleteSandboxResponse>("DeleteSandbox", &req, CALL_TIMEOUT).await.map(drop),
            }
        }
    }

    fn list_tagged(&self, tag: &str) -> impl Future<Output = Result<Vec<String>, Error>> + Send {
        let tag = tag.to_owned();
        async move {
            let mut ids = Vec::new();
            let mut page_token = String::new();
            loop {
                let req = wire::ListSandboxesRequest { page_size: 100, page_token: page_token.clone(), tags: vec![tag.clone()], ..Default::default() };
                let page: wire::ListSandboxesResponse = self.retried("ListSandboxes", &req, CALL_TIMEOUT).await?;
                ids.extend(page.sandboxes.into_iter().filter(|s| !matches!(s.state(), State::Terminated | State::Completed | State::Failed)).map(|s| s.sandbox_id));
                if page.next_page_token.is_empty() {
                    return Ok(ids);
                }
                page_token = page.next_page_token;
            }
        }
    }
}

/// A fresh idempotency key.
fn request_id() -> String {
    format!("rlx-{:016x}{:016x}", (retry::jitter() * 2f64.powi(53)) as u64, (retry::jitter() * 2f64.powi(53)) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn credentials_follow_the_official_client_and_name_the_variables() {
        let env = |pairs: &'static [(&'static str, &'static str)]| move |k: &str| pairs.iter().find(|(n, _)| *n == k).map(|(_, v)| (*v).to_owned());
        let h = credentials(env(&[("CWSANDBOX_API_KEY", "k1"), ("WANDB_API_KEY", "w")])).unwrap();
        assert_eq!(h["authorization"], "Bearer k1");
        assert!(h["authorization"].is_sensitive());
        let h = credentials(env(&[("AVIATO_API_KEY", "k2")])).unwrap();
        assert_eq!(h["authorization"], "Bearer k2");
        let h = credentials(env(&[("WANDB_API_KEY", "w"), ("WANDB_ENTITY_NAME", "team")])).unwrap();
        assert_eq!((h["x-wandb-api-key"].to_str().unwrap(), h["x-entity-id"].to_str().unwrap()), ("w", "team"));
        let e = credentials(env(&[("CWSANDBOX_API_KEY", " ")])).unwrap_err();
        assert!(e.is_user_error());
        let Error::Preflight { hint, .. } = e else { panic!() };
        assert!(hint.contains("CWSANDBOX_API_KEY") && hint.contains("AVIATO_API_KEY") && hint.contains("WANDB_API_KEY"), "{hint}");
    }

    #[test]
    fn urls_are_checked() {
        assert!(CwClient::new("http://127.0.0.1:1", HeaderMap::new()).is_ok());
        assert!(CwClient::new("ftp://x", HeaderMap::new()).is_err());
        assert!(CwClient::new("https://api.cwsandbox.com/v1", HeaderMap::new()).is_err());
    }
}
