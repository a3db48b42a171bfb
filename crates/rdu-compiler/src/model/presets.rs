//! TODO(helper): built-in presets (placeholder signatures).
use crate::error::Result;
use crate::model::spec::ModelSpec;

pub fn names() -> Vec<&'static str> {
    Vec::new()
}

pub fn resolve(model: &str) -> Result<ModelSpec> {
    Err(crate::Error::UnknownModel(model.to_string()))
}
