//! The experiment spec: what users write, and nothing of rlx above it (docs/architecture.md).
//!
//! - [`types`]: the spec sections (serde + schemars); their doc comments are the user reference.
//! - [`source`], [`node`]: YAML text to a tree whose every value knows its file:line:column.
//! - [`schema`]: the generated JSON Schema and a validator that reports every problem at once.
//! - [`overrides`]: `key.path=value` arguments, aliases, sweep axes.
//! - [`sample`]: sweep ranges (`loguniform(1e-6,1e-4)`, `range(0,3)`) for grids and `--sample`.
//! - [`health`]: the `diagnostics:` section (run-health signals).
//! - [`defaults`]: the named defaults the plan applies and the schema quotes.
//! - [`diagnostic`]: problems with their spans, drawn by `cli::diagnostics`.
//!
//! What the spec means (checks across fields, defaults applied, run ids) is `crate::plan`'s.

pub mod defaults;
pub mod health;
pub mod language;
pub(crate) mod diagnostic;
pub mod node;
pub mod overrides;
pub mod sample;
pub mod schema;
pub mod source;
pub mod types;

pub use diagnostic::{Diagnostic, Diagnostics};
pub use types::Spec;
