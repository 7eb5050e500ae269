//! The client's side of a request: its framing checked, its body read within the input
//! limits, and, for what Tether answers itself, JSON and SSE answers written and
//! committed events streamed to it.

pub mod body;
pub mod framing;
pub mod respond;
pub mod stream;
