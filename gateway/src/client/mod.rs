//! The client's side of a request: its framing checked, its body read within the input
//! limits, and, for what Tether answers itself, JSON and SSE answers (or a gRPC call's
//! messages and status) written and committed events streamed to it.

pub mod body;
pub mod framing;
pub mod grpc;
pub mod head;
pub mod reply;
pub mod respond;
pub mod site;
pub mod stream;
