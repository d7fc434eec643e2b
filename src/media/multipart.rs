//! A bounded, zero-copy `multipart/form-data` reader: text fields and file parts as
//! byte ranges of the body as received, so an upload is forwarded byte-exact.

use crate::protocol::Invalid;
use std::ops::Range;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Field {
    pub name: String,
    pub value: String,
    /// Where the value lies in the body.
    pub range: Range<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilePart {
    pub name: String,
    pub filename: Option<String>,
    pub content_type: Option<String>,
    /// Where the file's bytes lie in the body.
    pub range: Range<usize>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Form {
    pub fields: Vec<Field>,
    pub files: Vec<FilePart>,
}

impl Form {
    pub fn field(&self, name: &str) -> Option<&str> {
        todo!()
    }

    pub fn file(&self, name: &str) -> Option<&FilePart> {
        todo!()
    }
}

/// The boundary of a `multipart/form-data` content type.
pub fn boundary(content_type: &str) -> Option<String> {
    todo!()
}

/// Parses a whole multipart body.
pub fn parse(body: &[u8], boundary: &str) -> Result<Form, Invalid> {
    todo!()
}

/// The body with one text field's value replaced, every other byte as it was.
pub fn replace_field(body: &[u8], form: &Form, name: &str, value: &str) -> Option<Vec<u8>> {
    todo!()
}
