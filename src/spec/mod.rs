//! The experiment spec: what users write and what the rest of rlx reads.
//!
//! - [`types`]: the spec sections (serde + schemars); their doc comments are the user reference.
//! - [`source`], [`node`]: YAML text to a tree whose every value knows its file:line:column.
//! - [`schema`]: the generated JSON Schema and a validator that reports every problem at once.
//! - [`overrides`]: `key.path=value` arguments, aliases, sweep axes.
//! - [`sample`]: sweep ranges (`loguniform(1e-6,1e-4)`, `range(0,3)`) for grids and `--sample`.
//! - [`check`]: semantic rules (batch arithmetic, ranges, files, templates).
//! - [`plan`]: the pipeline from file + overrides to a [`Plan`] with its run id.
//! - [`resolved`]: the values the program uses ([`Resolved`]), derived once from the checked spec.
//! - [`sweep`]: grids of plans.

pub(crate) mod check;
pub mod diagnostic;
pub(crate) mod explain;
pub mod node;
pub mod overrides;
pub mod plan;
pub mod resolved;
pub mod sample;
pub mod schema;
pub mod source;
pub(crate) mod sweep;
pub mod types;

pub use diagnostic::{Diagnostic, Diagnostics};
pub use plan::{Error, Plan, plan};
pub use resolved::Resolved;
pub use types::Spec;
