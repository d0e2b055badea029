//! The experiment spec: YAML loading with source locations, JSON Schema validation, overrides,
//! sweeps, semantic checks and run ids.

pub mod diagnostic;
pub mod node;
pub mod schema;
pub mod source;
pub mod types;

pub use types::Spec;
