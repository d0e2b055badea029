//! The GRPO step loop that joins spec, data, prompts, sampler, sandbox, rewards and trainer
//! (design §1). Not built yet: `rlx run` validates and plans, then stops here with a clear error.

use crate::spec::Plan;

/// Why a run could not proceed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The step loop does not exist yet.
    #[error("the training engine is not implemented yet; the spec is valid and would run as `{run_id}`")]
    NotImplemented {
        /// The run that would have started.
        run_id: String,
    },
}

/// Runs a planned experiment to completion.
///
/// # Errors
/// Always [`Error::NotImplemented`] for now.
pub fn run(plan: &Plan) -> Result<(), Error> {
    Err(Error::NotImplemented { run_id: plan.run_id.clone() })
}
