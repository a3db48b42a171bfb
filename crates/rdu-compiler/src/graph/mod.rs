//! Dataflow graph and reference interpreter: TODO
