//! Compiles the A2A protocol's `a2a.proto` (with the Google API protos it imports) into a
//! descriptor set at build time, with protox (pure Rust: no `protoc` needed). The gRPC
//! surface and upstream read messages through these descriptors.

use prost::Message;

fn main() {
    println!("cargo:rerun-if-changed=proto");
    let files = [
        "a2a.proto",
        "google/rpc/status.proto",
        "google/rpc/error_details.proto",
    ];
    let descriptors = protox::compile(files, ["proto"]).unwrap_or_else(|e| {
        panic!("runtime-adapter/proto does not compile: {e}");
    });
    let out = std::path::PathBuf::from(std::env::var("OUT_DIR").expect("cargo sets OUT_DIR"));
    std::fs::write(out.join("a2a_descriptors.bin"), descriptors.encode_to_vec())
        .expect("write the descriptor set");
}
