//! Lowering: the streamed deployments (one program per layer kind plus a manifest).

pub mod streamed;
