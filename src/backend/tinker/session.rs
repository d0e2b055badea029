//! A Tinker session (SDK 0.38.0): the client configuration, `create_session`, a
//! heartbeat every 10 s while it lives, `sessions/{id}/finish` when it ends, and the per-session
//! counters that name models (`{session}:train:{n}`) and sampling sessions.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::error::Error;
use super::http::{Body, Client};
use super::profile::Profile;
use crate::tinker::SDK_VERSION;
use crate::tinker::wire;

/// Heartbeat period (SDK: 10 s).
const HEARTBEAT: Duration = Duration::from_secs(10);

/// A live session. Dropping the last handle stops the heartbeat and finishes the session.
pub struct Session {
    client: Client,
    id: String,
    next_model_seq: AtomicU32,
    next_sampling_seq: AtomicU32,
    finished: AtomicBool,
    heartbeat: tokio::task::JoinHandle<()>,
}

impl Session {
    /// A sampling session of this session on a base model or on saved weights (`model_path`,
    /// `tinker://…`); its id.
    ///
    /// # Errors
    /// A model or path the service does not know, a failed request.
    pub(super) async fn create_sampling_session(&self, base_model: Option<String>, model_path: Option<String>) -> Result<String, Error> {
        let body = wire::CreateSamplingSessionRequest {
            session_id: self.id().to_string(),
            sampling_session_seq_id: u64::from(self.next_sampling_seq()),
            base_model,
            model_path,
            r#type: wire::literal::CreateSamplingSession,
        };
        let created: wire::CreateSamplingSessionResponse = self.client().post_json("/api/v1/create_sampling_session", &body, "ServiceClient.create_sampling_client").await?;
        Ok(created.sampling_session_id)
    }

    /// Reads the client configuration, creates a session and starts its heartbeat.
    ///
    /// # Errors
    /// The service cannot be reached or refuses the credential, or asks for a feature rlx does
    /// not implement (JWT exchange, compressed forward_backward bodies).
    pub async fn create(client: Client, user_metadata: serde_json::Map<String, serde_json::Value>, profile: &Profile) -> Result<Arc<Session>, Error> {
        let config = client_config(&client, profile).await?;
        if config.pjwt_auth_enabled {
            return Err(Error::Unsupported { what: "the service requires the JWT credential exchange (`pjwt_auth_enabled`), which rlx does not implement yet".into() });
        }
        if config.proto_compress_fwdbwd {
            tracing::info!("the service prefers zstd-compressed forward_backward bodies; rlx sends them uncompressed");
        }
        let body = wire::CreateSessionRequest {
            tags: tags(),
            user_metadata: Some(user_metadata),
            sdk_version: SDK_VERSION.into(),
            project_id: std::env::var("TINKER_PROJECT_ID").ok().filter(|p| !p.is_empty()),
            display_name: None,
            r#type: wire::literal::CreateSession,
        };
        let created: wire::CreateSessionResponse = client.post_json("/api/v1/create_session", &body, "ServiceClient.create_session").await?;
        if let Some(m) = &created.info_message {
            tracing::info!("Tinker: {m}");
        }
        if let Some(m) = &created.warning_message {
            tracing::warn!("Tinker: {m}");
        }
        if let Some(m) = created.error_message {
            return Err(Error::Refused { what: "create_session".into(), message: m });
        }
        let heartbeat = tokio::spawn(heartbeat(client.clone(), created.session_id.clone()));
        Ok(Arc::new(Session {
            client,
            id: created.session_id,
            next_model_seq: AtomicU32::new(0),
            next_sampling_seq: AtomicU32::new(0),
            finished: AtomicBool::new(false),
            heartbeat,
        }))
    }

    /// The session id.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The client.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// The next `model_seq_id` (0, 1, ...), for `create_model` and create-from-state.
    pub fn next_model_seq(&self) -> u32 {
        self.next_model_seq.fetch_add(1, Ordering::SeqCst)
    }

    /// The next `sampling_session_seq_id`; gaps are fine (§12).
    pub fn next_sampling_seq(&self) -> u32 {
        self.next_sampling_seq.fetch_add(1, Ordering::SeqCst)
    }

    /// Ends the session with `reason` (`success`, `errored`, `interrupted`); only the first call
    /// sends anything.
    pub async fn finish(&self, reason: wire::FinishStatus, detail: Option<&str>) {
        if self.finished.swap(true, Ordering::SeqCst) {
            return;
        }
        self.heartbeat.abort();
        let body = finish_body(reason, detail);
        let path = format!("/api/v1/sessions/{}/finish", self.id);
        if let Err(e) = self.client.send_once(&path, Some(&body), &[], Duration::from_secs(10)).await {
            tracing::debug!(session = %self.id, "finishing the Tinker session failed: {}", super::http::causes(&e));
        }
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.heartbeat.abort();
        if self.finished.load(Ordering::SeqCst) {
            return;
        }
        // Best effort, on a thread of its own: a drop can happen inside an async task, outside
        // any runtime, or while the runtime shuts down, and blocking on the caller's runtime
        // panics in the last two. The server also ends a session whose heartbeats stop.
        let (client, path) = (self.client.clone(), format!("/api/v1/sessions/{}/finish", self.id));
        let sent = std::thread::spawn(move || {
            let Ok(rt) = tokio::runtime::Builder::new_current_thread().enable_all().build() else { return };
            rt.block_on(async move {
                let body = finish_body(wire::FinishStatus::Success, None);
                let _ = client.send_once(&path, Some(&body), &[], Duration::from_secs(5)).await;
            });
        });
        let _ = sent.join();
    }
}

/// The server's feature flags. Servers without `client/config` (SkyRL-tx, the older wire) get
/// the SDK's defaults; a 404 from a server declared to have it is taken the same way, since the
/// flags only tune the client, and the session request that follows is the real first contact.
async fn client_config(client: &Client, profile: &Profile) -> Result<wire::ClientConfigResponse, Error> {
    let ask = wire::ClientConfigRequest { sdk_version: SDK_VERSION.into() };
    if !profile.client_config {
        // Still the first contact: a wrong URL fails here, at once, with the setting to fix.
        match client.first_contact_get("/api/v1/healthz", "ServiceClient.__init__").await {
            Ok(_) | Err(Error::Status { .. }) => {}
            Err(e) => return Err(e),
        }
        return Ok(wire::ClientConfigResponse::default());
    }
    match client.first_contact("/api/v1/client/config", &ask, "ServiceClient.__init__").await {
        Err(Error::Status { status: 404, .. }) => {
            tracing::info!(server = %profile.server, "the server has no `client/config`; using the SDK's defaults");
            Ok(wire::ClientConfigResponse::default())
        }
        other => other,
    }
}

fn finish_body(reason: wire::FinishStatus, detail: Option<&str>) -> Body {
    let body = wire::FinishSessionRequest { reason: wire::FinishReason { r#type: reason }, detail: detail.map(str::to_string) };
    Body::json(&body)
}

/// `TINKER_TAGS` (a comma-separated list), as the SDK sends them.
fn tags() -> Vec<String> {
    std::env::var("TINKER_TAGS").map(|t| t.split(',').map(str::trim).filter(|s| !s.is_empty()).map(str::to_string).collect()).unwrap_or_default()
}

/// One heartbeat every 10 s, no retries (the next beat is the retry); stops when the server says
/// the session is over (410); warns once after two minutes of failures.
async fn heartbeat(client: Client, session_id: String) {
    let beat = wire::SessionHeartbeatRequest { session_id: session_id.clone(), r#type: wire::literal::SessionHeartbeat };
    let body = Body::json(&beat);
    let mut failing_since: Option<Instant> = None;
    let mut warned = false;
    let mut tick = tokio::time::interval(HEARTBEAT);
    tick.tick().await;
    loop {
        tick.tick().await;
        match client.send_once("/api/v1/session_heartbeat", Some(&body), &[], HEARTBEAT).await {
            Ok(r) if r.status().as_u16() == 410 => {
                tracing::warn!(session = %session_id, "Tinker ended the session (410); no more heartbeats");
                return;
            }
            Ok(r) if r.status().is_success() => {
                failing_since = None;
                warned = false;
            }
            other => {
                let since = *failing_since.get_or_insert_with(Instant::now);
                if since.elapsed() >= Duration::from_secs(120) && !warned {
                    warned = true;
                    let why = match other {
                        Ok(r) => format!("HTTP {}", r.status()),
                        Err(e) => super::http::causes(&e),
                    };
                    tracing::warn!(session = %session_id, "Tinker heartbeats have failed for two minutes ({why}); the service may end the session");
                }
            }
        }
    }
}
