//! The OpenAPI 3.1 documents of the client API and of the admin listener, served as the
//! repository's files (`openapi/`), byte for byte, built into the binary.
//!
//! Served without the admin token, as the console's files are: each is the same file for
//! every deployment and carries nothing of this one (no key, channel, model or address),
//! and code generators and API explorers fetch them without a secret. Everything under
//! `/admin/` keeps needing the token.

/// `GET /openapi/client.yaml`.
pub const CLIENT: &[u8] =
    include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/client.yaml"));
/// `GET /openapi/admin.yaml`.
pub const ADMIN: &[u8] = include_bytes!(concat!(env!("CARGO_MANIFEST_DIR"), "/openapi/admin.yaml"));
/// RFC 9512's media type for YAML.
pub const CONTENT_TYPE: &str = "application/yaml";
