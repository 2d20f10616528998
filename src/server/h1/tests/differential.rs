//! h1.rs against hyper's own HTTP/1.1 server.
