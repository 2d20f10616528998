//! The vocabulary every layer speaks: origins, bodies, headers and the
//! destination policy (which addresses the proxy may reach); and the
//! private files every layer that keeps state writes.

pub(crate) mod body;
pub(crate) mod clock;
pub(crate) mod date;
pub mod destination;
pub(crate) mod files;
pub(crate) mod headers;
pub(crate) mod names;
pub mod origin;
pub mod price;
pub mod signal;
pub(crate) mod text;
