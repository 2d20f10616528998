//! The own HTTP/1.1 server side's codec.
