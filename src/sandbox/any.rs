//! [`AnyGrader`]: every grading backend behind one type, for callers that pick one at run time.

use super::cwsandbox::client::CwClient;
use super::fusion::FusionClient;
use super::limits::GradeOptions;
use super::local::LocalSandbox;
use super::remote::{RemoteGrader, Session};
use super::verdict::{Grader, Verdict};
use crate::data::Problem;

/// Either backend behind one type, for callers that pick it at run time (the spec's
/// `sandbox.kind`, `rlx grade --sandbox`): [`Grader`] is not object-safe.
#[derive(Clone)]
pub enum AnyGrader {
    /// The embedded sandbox.
    Local(LocalSandbox),
    /// A Sandbox Fusion server (boxed: the HTTP client is large next to the pool handle).
    Fusion(Box<FusionClient>),
    /// A hosted sandbox service behind the remote seam: CoreWeave Sandbox (Aviato).
    Remote(Box<RemoteGrader<CwClient>>),
}

/// A remote sandbox held for one conversation (see [`RemoteGrader::open_session`]).
pub type RemoteSession = Session<CwClient>;

impl AnyGrader {
    /// A sandbox of its own for one conversation, kept between commands (the `bash` tool's):
    /// only a remote service gives one; `None` for the local and Fusion sandboxes, whose runs
    /// share nothing.
    pub async fn session(&self) -> Option<Result<RemoteSession, super::error::Error>> {
        match self {
            AnyGrader::Remote(r) => Some(r.open_session().await),
            AnyGrader::Local(_) | AnyGrader::Fusion(_) => None,
        }
    }

    /// Stops what the grader keeps between gradings (a remote pool's sandboxes, with reuse per
    /// worker); nothing for the others. Call it once grading is over, on every way out.
    pub async fn close(&self) {
        if let AnyGrader::Remote(r) = self {
            let n = r.close().await;
            if n > 0 {
                tracing::info!(stopped = n, created = r.created(), "remote sandboxes stopped at the end");
            }
        }
    }
}

impl Grader for AnyGrader {
    async fn grade(&self, problem: &Problem, code: &str, opts: &GradeOptions) -> Verdict {
        match self {
            AnyGrader::Local(g) => g.grade(problem, code, opts).await,
            AnyGrader::Fusion(g) => g.grade(problem, code, opts).await,
            AnyGrader::Remote(g) => g.grade(problem, code, opts).await,
        }
    }
}

