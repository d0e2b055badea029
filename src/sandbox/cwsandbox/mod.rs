//! CoreWeave Sandbox (formerly Aviato): its gRPC protocol, typed once ([`wire`]), rlx's server
//! of it over the embedded sandbox ([`server`]) and rlx's client of it.

pub mod access;
pub mod client;
pub(crate) mod grpc;
pub(crate) mod rootfs;
pub mod server;
pub(crate) mod wire;
