//! `sandbox:` where model-written code runs.
//!
//! Part of the spec types ([`super`]); the doc comments are the user reference and generate
//! `schemas/experiment.schema.json`.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Where model-written code runs.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Sandbox {
    /// `local` (rlx's embedded, isolated sandbox), `fusion` (a Sandbox Fusion server) or
    /// `cwsandbox` (CoreWeave Sandbox, formerly Aviato).
    /// Default `local`.
    #[serde(default)]
    pub kind: SandboxKind,
    /// Sandbox Fusion endpoint. Default `http://localhost:8080/run_code`.
    #[serde(default = "default_fusion_url")]
    pub url: String,
    /// Programs running at once. For `fusion`, Default `32`; for `local`, the number of cores.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub concurrency: Option<u32>,
    /// Address-space limit per program, MiB. Default `2048`.
    #[serde(default = "default_memory_mb")]
    #[schemars(range(min = 16))]
    pub memory_mb: u32,
    /// Refuse to run model code when an isolation layer (namespaces, limits) is unavailable,
    /// instead of warning and going on. Default `true`.
    #[serde(default = "crate::spec::defaults::yes")]
    pub strict: bool,
    /// CoreWeave Sandbox (Aviato) settings, for `kind: cwsandbox`. Credentials come from the
    /// environment or `.env`: `CWSANDBOX_API_KEY`, `AVIATO_API_KEY`, or `WANDB_API_KEY` with
    /// `WANDB_ENTITY_NAME`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cwsandbox: Option<CwSandbox>,
}

/// A CoreWeave Sandbox (Aviato) service: one sandbox per graded completion, as the reference
/// workflow creates one per rollout.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CwSandbox {
    /// The service's gRPC endpoint. Default: `CWSANDBOX_BASE_URL`, else
    /// `https://api.cwsandbox.com`; `http://127.0.0.1:PORT` for `rlx sandbox serve --protocol
    /// cwsandbox`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_url: Option<String>,
    /// Container image. Default `python:3.11` (the reference's).
    #[serde(default = "default_cw_image")]
    pub image: String,
    /// Sandboxes alive at once. Default `32`.
    #[serde(default = "default_cw_max_alive")]
    #[schemars(range(min = 1))]
    pub max_alive: u32,
    /// Sandbox creations per second at most. Default `4`.
    #[serde(default = "default_cw_creates_per_s")]
    pub creates_per_s: f64,
    /// CPU per sandbox (a Kubernetes quantity such as `"1"` or `"500m"`). Default: the
    /// service's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu: Option<String>,
    /// Seconds a new sandbox may take to become RUNNING before that is an infrastructure error.
    /// Default `120`.
    #[serde(default = "default_cw_ready_timeout_s")]
    pub ready_timeout_s: f64,
    /// The service ends a sandbox after this many seconds even if rlx cannot stop it. Default
    /// `3600`.
    #[serde(default = "default_cw_max_lifetime_s")]
    pub max_lifetime_s: u32,
    /// `per_rollout` (a fresh sandbox per graded completion, as the reference does) or
    /// `per_worker` (each of the `max_alive` slots keeps its sandbox and grades in it again, its
    /// grading directory emptied between uses). Default `per_rollout`.
    #[serde(default)]
    pub reuse: CwReuse,
}

/// How long a CoreWeave sandbox serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum CwReuse {
    /// One sandbox per graded completion, stopped after its verdict.
    #[default]
    PerRollout,
    /// One sandbox per worker (slot of `max_alive`), reused until the run ends; the grading
    /// directory is emptied between uses, and a sandbox whose command failed or ran past its
    /// deadline is replaced.
    PerWorker,
}

fn default_cw_image() -> String {
    "python:3.11".into()
}
fn default_cw_max_alive() -> u32 {
    32
}
fn default_cw_creates_per_s() -> f64 {
    4.0
}
fn default_cw_ready_timeout_s() -> f64 {
    120.0
}
fn default_cw_max_lifetime_s() -> u32 {
    3600
}

impl Default for CwSandbox {
    fn default() -> Self {
        CwSandbox {
            base_url: None,
            image: default_cw_image(),
            max_alive: default_cw_max_alive(),
            creates_per_s: default_cw_creates_per_s(),
            cpu: None,
            ready_timeout_s: default_cw_ready_timeout_s(),
            max_lifetime_s: default_cw_max_lifetime_s(),
            reuse: CwReuse::default(),
        }
    }
}

fn default_fusion_url() -> String {
    "http://localhost:8080/run_code".into()
}
fn default_memory_mb() -> u32 {
    2048
}

impl Default for Sandbox {
    fn default() -> Self {
        Sandbox {
            kind: SandboxKind::default(),
            url: default_fusion_url(),
            concurrency: None,
            memory_mb: default_memory_mb(),
            strict: true,
            cwsandbox: None,
        }
    }
}

/// Sandbox implementations.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SandboxKind {
    /// rlx's embedded sandbox: isolated processes, warm Python workers.
    #[default]
    Local,
    /// A Sandbox Fusion server over HTTP.
    Fusion,
    /// CoreWeave Sandbox (formerly Aviato) over gRPC: a hosted sandbox per graded completion
    /// (`sandbox.cwsandbox` sets the endpoint, image and bounds).
    Cwsandbox,
}
