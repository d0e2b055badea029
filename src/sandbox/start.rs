//! Starting a sandbox: the one start-up path of `rlx run` (through
//! [`crate::engine::grading::Sandboxes`]), `rlx grade` and `rlx sandbox serve`.
//!
//! Why one path: each command used to start the sandbox its own way, and they drifted; `rlx run`
//! with `sandbox.strict: false` went on silently with isolation layers missing, although the
//! spec reference promises a warning. Here a non-strict start with missing layers always comes
//! back with a [`Started::warnings`] entry, and a strict one fails with
//! [`Error::Incomplete`]; the caller only chooses how to show the warning.
//!
//! `RLX_SANDBOX_NAMESPACES=0` turns the namespaces off (the degraded mode of machines that forbid
//! them): an escape hatch where namespaces misbehave, and how tests reach the degraded mode
//! through the binary.

use serde_json::{Value, json};

use super::fusion::{FusionClient, FusionConfig};
use super::local::{LocalConfig, LocalSandbox};
use super::any::AnyGrader;
use super::error::Error;
use super::exec::Protection;
use crate::spec::types::{Sandbox as SandboxSpec, SandboxKind};


/// A started sandbox, what protects the host, and what the user must be told.
pub struct Started<G = AnyGrader> {
    /// The grader (for the local sandbox, its worker pool).
    pub grader: G,
    /// The isolation in force, as `provenance.json` records it: the local sandbox's
    /// [`Protection`], or `{kind: fusion, url}` (Sandbox Fusion's isolation is its own).
    pub protection: Value,
    /// One line per problem that does not stop the start: today, isolation layers missing
    /// while `strict` is off. Empty when nothing needs saying.
    pub warnings: Vec<String>,
}

/// Starts the sandbox a spec's `sandbox` section describes.
///
/// # Errors
/// [`Error::Incomplete`] when `strict` is on and a layer is missing; [`Error::Python`] or
/// [`Error::Worker`] when the local workers cannot start; [`Error::Remote`] for a Sandbox
/// Fusion URL that cannot be used.
pub async fn start(spec: &SandboxSpec) -> Result<Started, Error> {
    start_for(spec, None).await
}

/// [`start`] for a run: a remote service's sandboxes are tagged with the run (`rlx-job-<run
/// id>`), and those a killed run of the same id left are stopped first (the resume's clean-up).
///
/// # Errors
/// As [`start`]; for `cwsandbox` also missing credentials and an endpoint that does not answer
/// ([`Error::Preflight`], exit code 2).
pub async fn start_for(spec: &SandboxSpec, run_id: Option<&str>) -> Result<Started, Error> {
    match spec.kind {
        SandboxKind::Cwsandbox => start_cwsandbox(spec, run_id, |k| std::env::var(k).ok()).await,
        SandboxKind::Local => {
            let mut config = LocalConfig { strict: spec.strict, ..LocalConfig::default() };
            if let Some(c) = spec.concurrency {
                config.workers = c as usize;
            }
            let s = start_local(config).await?;
            Ok(Started { grader: AnyGrader::Local(s.grader), protection: s.protection, warnings: s.warnings })
        }
        SandboxKind::Fusion => {
            // The plan applies `sandbox.concurrency`'s default (`spec::defaults::FUSION_CONCURRENCY`);
            // a spec built in code without one gets the client's own.
            let mut config = FusionConfig::new(&spec.url);
            if let Some(c) = spec.concurrency {
                config.concurrency = c as usize;
            }
            let client = FusionClient::new(config)?;
            Ok(Started {
                grader: AnyGrader::Fusion(Box::new(client)),
                protection: json!({"kind": "fusion", "url": spec.url}),
                warnings: vec![],
            })
        }
    }
}

/// The CoreWeave Sandbox grader: credentials from `var`, first contact within seconds, then the
/// leftovers of a killed run with the same tag stopped.
async fn start_cwsandbox(spec: &SandboxSpec, run_id: Option<&str>, var: impl Fn(&str) -> Option<String>) -> Result<Started, Error> {
    use super::cwsandbox::client::{CwClient, DEFAULT_BASE_URL, credentials};
    use super::remote::{CreateSpec, PoolLimits, RemoteGrader};
    let cw = spec.cwsandbox.clone().unwrap_or_default();
    let base_url = cw.base_url.clone().or_else(|| var("CWSANDBOX_BASE_URL")).unwrap_or_else(|| DEFAULT_BASE_URL.to_owned());
    let client = CwClient::new(&base_url, credentials(&var)?)?;
    client.ping().await.map_err(|reason| Error::Preflight {
        sandbox: format!("CoreWeave Sandbox at {base_url} (sandbox.cwsandbox.base_url)"),
        reason,
        hint: "check the URL and the network (`rlx sandbox serve --protocol cwsandbox` serves one locally), or use `sandbox.kind: local`".into(),
    })?;
    let job_tag = run_id.map_or_else(|| format!("rlx-grade-{}", std::process::id()), |r| format!("rlx-job-{r}"));
    let create = CreateSpec {
        image: cw.image.clone(),
        tags: vec!["rlx".into(), job_tag.clone()],
        cpu: cw.cpu.clone(),
        memory_mb: u64::from(spec.memory_mb),
        max_lifetime: std::time::Duration::from_secs(u64::from(cw.max_lifetime_s)),
        ready_timeout: std::time::Duration::from_secs_f64(cw.ready_timeout_s.max(1.0)),
    };
    let limits = PoolLimits { max_alive: cw.max_alive.max(1) as usize, creates_per_s: cw.creates_per_s, reuse: cw.reuse == crate::spec::types::CwReuse::PerWorker };
    let grader = RemoteGrader::new(client, create, limits);
    let mut warnings = vec![];
    if run_id.is_some() {
        let n = grader.stop_leftovers(&job_tag).await?;
        if n > 0 {
            warnings.push(format!("stopped {n} sandbox(es) tagged `{job_tag}` that an earlier, interrupted run of this experiment left at {base_url}"));
        }
    }
    Ok(Started {
        grader: AnyGrader::Remote(Box::new(grader)),
        protection: json!({"kind": "cwsandbox", "url": base_url, "image": cw.image, "reuse": cw.reuse, "isolation": "the service's"}),
        warnings,
    })
}

/// Starts the embedded sandbox (what `rlx sandbox serve` serves), honouring
/// `RLX_SANDBOX_NAMESPACES`.
///
/// # Errors
/// As [`start`] for the local sandbox.
pub(crate) async fn start_local(mut config: LocalConfig) -> Result<Started<LocalSandbox>, Error> {
    if namespaces_disabled(|k| std::env::var(k).ok()) {
        config.namespaces = false;
    }
    let strict = config.strict;
    let sandbox = LocalSandbox::start(config).await?;
    let protection = sandbox.protection().clone();
    let warnings = if strict { vec![] } else { degradation_warning(&protection).into_iter().collect() };
    let protection = serde_json::to_value(&protection).unwrap_or(Value::Null);
    Ok(Started { grader: sandbox, protection, warnings })
}

/// The warning for a sandbox that runs with layers missing, `None` when none is.
pub(crate) fn degradation_warning(p: &Protection) -> Option<String> {
    if p.is_complete() {
        return None;
    }
    let missing = if p.notes.is_empty() { "an isolation layer is unavailable".to_owned() } else { p.notes.join("; ") };
    Some(format!("the sandbox runs model code with reduced isolation on this machine: {missing}"))
}

/// Whether `RLX_SANDBOX_NAMESPACES` asks for no namespaces (`0`, `off`, `no`, `false`).
fn namespaces_disabled(var: impl Fn(&str) -> Option<String>) -> bool {
    var(crate::switches::SANDBOX_NAMESPACES.name).is_some_and(|v| ["0", "off", "no", "false"].contains(&v.trim().to_ascii_lowercase().as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_warning_names_what_is_missing() {
        let complete = Protection { network_namespace: true, mount_namespace: true, pid_namespace: true, rlimits: true, ..Protection::default() };
        assert_eq!(degradation_warning(&complete), None);
        let degraded = Protection { rlimits: true, notes: vec!["user namespaces unavailable (EPERM)".into()], ..Protection::default() };
        let w = degradation_warning(&degraded).unwrap();
        assert!(w.contains("reduced isolation") && w.contains("user namespaces unavailable (EPERM)"), "{w}");
        assert!(degradation_warning(&Protection::default()).unwrap().contains("an isolation layer is unavailable"));
    }

    #[test]
    fn namespaces_switch() {
        let with = |v: &'static str| move |k: &str| (k == "RLX_SANDBOX_NAMESPACES").then(|| v.to_owned());
        assert!(namespaces_disabled(with("0")) && namespaces_disabled(with("Off")));
        assert!(!namespaces_disabled(with("1")) && !namespaces_disabled(|_| None));
    }
}
