//! Which server speaks Tinker's protocol at `backend.base_url`, and what it accepts.
//!
//! Hosted Tinker is one of several servers of the same HTTP API: `rlx serve`, SkyRL's
//! Tinker server (its JAX engine "tx", or SkyRL-Train's FSDP/Megatron backends), verl's
//! `verl_tinker` recipe, TuFT. They differ in what they accept: the losses, the
//! `forward_backward` body (protobuf since SDK 0.25, JSON before), how a saved state comes back
//! (a new model created from the state, or a load into the existing model), LoRA ranks, and
//! whether `client/config` exists. A [`Profile`] says so for one server; the spec names the
//! server (`backend.server`) or rlx asks the server at first contact ([`discover`]).
//!
//! What a profile cannot know (a SkyRL started with a larger `max_lora_rank`, a loss a newer
//! release added) the server still decides: its refusal comes back with the server's name.

use serde::Deserialize;

use super::http::Client;

/// A server of Tinker's API (`backend.server`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Server {
    /// Thinking Machines' hosted service.
    Tinker,
    /// `rlx serve`.
    Rlx,
    /// SkyRL's Tinker server (`skyrl.tinker.api`, `tx.tinker.api`).
    Skyrl,
    /// verl's `verl_tinker` recipe.
    VerlTinker,
    /// TuFT.
    Tuft,
}

/// The `forward_backward` body a server reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// `tinker_public.ForwardBackwardRequest` (SDK ≥ 0.25); results may come back as protobuf.
    Protobuf,
    /// `{"model_id", "forward_backward_input": {"data", "loss_fn", "loss_fn_config"}}` to
    /// `/forward_backward`, `forward_input` to `/forward` (SDK < 0.25); JSON results.
    Json,
}

/// What one server accepts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// The server.
    pub server: Server,
    /// Its `forward_backward` body.
    pub wire: Wire,
    /// The rlx losses it computes with rlx's definitions (Tinker's names).
    pub losses: &'static [&'static str],
    /// Largest LoRA rank it accepts by default (`None`: no documented limit).
    pub max_lora_rank: Option<u32>,
    /// A saved state comes back as a new model (`load_weights` with `session_id` and
    /// `model_seq_id`, SDK ≥ 0.30); otherwise it is loaded into the existing model (`model_id`).
    pub create_from_state: bool,
    /// `POST /client/config` exists (servers without it get the SDK's defaults).
    pub client_config: bool,
    /// The bits of a seed (LoRA initialisation, sampling) the server takes: JSON readers stop
    /// at i64, SkyRL's JAX PRNG keys at i32 (a larger one fails the request).
    pub seed_mask: u64,
}

/// Tinker's built-in losses that rlx computes identically (`gspo` is named by the protocol but
/// not defined, so no server gets it).
const TINKER_LOSSES: &[&str] = &["cross_entropy", "importance_sampling", "ppo", "cispo", "dro"];
/// SkyRL's JAX engine (`skyrl` 0.3+; `skyrl-tx` 0.3.0 lacks `cispo` and says so when asked).
const SKYRL_LOSSES: &[&str] = &["cross_entropy", "importance_sampling", "ppo", "cispo"];
/// The losses of SDKs before 0.25, which verl_tinker and TuFT pin.
const OLD_WIRE_LOSSES: &[&str] = &["cross_entropy", "importance_sampling", "ppo"];

impl Server {
    /// Every server, in the order docs and errors list them.
    pub const ALL: [Server; 5] = [Server::Tinker, Server::Rlx, Server::Skyrl, Server::VerlTinker, Server::Tuft];

    /// The name specs use (`backend.server`).
    pub fn name(self) -> &'static str {
        match self {
            Server::Tinker => "tinker",
            Server::Rlx => "rlx",
            Server::Skyrl => "skyrl",
            Server::VerlTinker => "verl_tinker",
            Server::Tuft => "tuft",
        }
    }

    /// What the server accepts.
    pub fn profile(self) -> Profile {
        let hosted = Profile { server: self, wire: Wire::Protobuf, losses: TINKER_LOSSES, max_lora_rank: None, create_from_state: true, client_config: true, seed_mask: i64::MAX as u64 };
        let old = Profile { server: self, wire: Wire::Json, losses: OLD_WIRE_LOSSES, max_lora_rank: None, create_from_state: false, client_config: false, seed_mask: i64::MAX as u64 };
        match self {
            Server::Tinker | Server::Rlx => hosted,
            // SkyRL's JAX engine keeps every adapter in one stacked array sized by
            // `max_lora_rank` (32 unless the server is started with more).
            Server::Skyrl => Profile { losses: SKYRL_LOSSES, max_lora_rank: Some(32), seed_mask: i32::MAX as u64, ..old },
            Server::VerlTinker | Server::Tuft => old,
        }
    }
}

impl std::fmt::Display for Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl Profile {
    /// Whether the server computes `loss` (a Tinker name) as rlx defines it.
    pub fn supports_loss(&self, loss: &str) -> bool {
        self.losses.contains(&loss)
    }
}

/// What `GET /` answers on servers that answer it.
#[derive(Deserialize)]
struct Root {
    #[serde(default)]
    name: String,
}

/// The server at `client`'s URL, when the spec does not say: SkyRL answers `GET /` with its
/// API's name ("Tinker API Mock", as of `skyrl`/`skyrl-tx` 0.3); anything else is taken for
/// Tinker's own protocol (hosted Tinker and `rlx serve` answer the same requests alike).
pub async fn discover(client: &Client) -> Server {
    let Ok(resp) = client.send_once("/", None, &[], std::time::Duration::from_secs(10)).await else { return Server::Tinker };
    if !resp.status().is_success() {
        return Server::Tinker;
    }
    match resp.json::<Root>().await {
        Ok(r) if r.name == "Tinker API Mock" || r.name.to_ascii_lowercase().contains("skyrl") => Server::Skyrl,
        _ => Server::Tinker,
    }
}

/// The declared server's profile, else the one [`discover`] finds at the URL.
pub(super) async fn for_client(client: &Client, declared: Option<Server>) -> Profile {
    let server = match declared {
        Some(s) => s,
        None => {
            let found = discover(client).await;
            if found != Server::Tinker {
                tracing::info!(server = %found, url = %client.base_url(), "found a `{found}` Tinker server (set `backend.server` to say so and skip the probe)");
            }
            found
        }
    };
    server.profile()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn profiles_say_what_each_server_takes() {
        let t = Server::Tinker.profile();
        assert_eq!(t.wire, Wire::Protobuf);
        assert!(t.create_from_state && t.supports_loss("dro") && !t.supports_loss("gspo"));
        let s = Server::Skyrl.profile();
        assert_eq!((s.wire, s.max_lora_rank, s.create_from_state, s.client_config), (Wire::Json, Some(32), false, false));
        assert!(s.supports_loss("cispo") && !s.supports_loss("dro") && !s.supports_loss("gspo"));
        assert!(!Server::VerlTinker.profile().supports_loss("cispo"));
        assert_eq!(s.seed_mask, 0x7fff_ffff);
        assert_eq!(Server::ALL.map(Server::name), ["tinker", "rlx", "skyrl", "verl_tinker", "tuft"]);
    }
}
