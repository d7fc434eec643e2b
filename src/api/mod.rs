//! Endpoints the gateway answers itself, and the admin listener: the admin API and the
//! console.

pub mod admin;
pub mod catalog;
pub mod console;
pub mod fields;
pub mod groups;
pub mod keys;
pub mod local;
pub mod openapi;
pub mod ops;
pub mod params;
pub mod policy;
pub mod records;
pub mod spend;
