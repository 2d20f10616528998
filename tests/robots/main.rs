//! The robots.txt engine on its own (`robots_proxy::robots`, pure: no
//! sockets, no proxy): every example of the specifications, properties
//! against reference implementations, and a corpus of real files.
//!
//! Proptest keeps its regressions in tests/proptest-regressions/, beside
//! this folder (its default place for a test target with a main.rs).

mod canon_props;
mod readings_scope;
mod robots_corpus;
mod robots_props;
mod robots_spec;
