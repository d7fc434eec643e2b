//! Endpoints the gateway answers itself, and the admin API.

pub mod admin;
pub mod keys;
pub mod local;
pub mod ops;

pub use crate::errors::store_error;
