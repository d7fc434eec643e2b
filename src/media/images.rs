//! Image endpoints (spec 4.6, 4.7, 8): validation of generation and edit requests, the
//! default model, and what an answer delivered.

use crate::protocol::{Invalid, Usage};
use serde_json::Value;

/// The three image model families of spec 8, by configured model names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Families {
    pub smallest: Vec<String>,
    pub middle: Vec<String>,
    pub newest: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    Smallest,
    Middle,
    Newest,
}

/// What a valid image request asks for: what the reservation and per-image prices need.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageJob {
    pub model: String,
    /// `None` for a model outside the configured families (generic rules only).
    pub family: Option<Family>,
    /// Images requested.
    pub n: u64,
    /// `1024x1024`, ... or `auto`.
    pub size: String,
    pub quality: Option<String>,
}

impl Families {
    pub fn family_of(&self, model: &str) -> Option<Family> {
        todo!()
    }
}

/// Spec 4.6 and 8: validates a generations body and fills in `model` when it is absent.
pub fn check_generation(body: &mut Value, families: &Families) -> Result<ImageJob, Invalid> {
    todo!()
}

/// Spec 4.7: validates the native edit shape.
pub fn check_edit(body: &Value, families: &Families) -> Result<ImageJob, Invalid> {
    todo!()
}

/// What an answer delivered: the number of images in `data`, the size and quality it
/// reports (when it does), and token usage (when it reports any).
pub fn delivered(answer: &[u8]) -> Option<Delivered> {
    todo!()
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Delivered {
    pub images: u64,
    pub size: Option<String>,
    pub quality: Option<String>,
    pub usage: Option<Usage>,
}
