//! The vocabulary every layer speaks: origins, bodies, headers and the
//! destination policy (which addresses the proxy may reach).

pub(crate) mod body;
pub mod destination;
pub(crate) mod headers;
pub mod origin;
pub(crate) mod text;
