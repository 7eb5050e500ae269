//! A2A v1.0's gRPC binding, `lf.a2a.v1.A2AService`: its methods, and its messages
//! converted to and from their JSON form (proto3's JSON mapping, which is what A2A v1.0's
//! JSON-RPC and HTTP+JSON bindings carry and what the log records). The descriptors come
//! from `runtime-adapter/proto/a2a.proto`, compiled by `build.rs`.

use std::sync::LazyLock;

use prost::Message as _;
use prost_reflect::{
    DescriptorPool, DeserializeOptions, DynamicMessage, MessageDescriptor, MethodDescriptor,
};
use serde_json::{json, Value};

use crate::grpc::{Code, GrpcService, Method, Status};

/// The service, as A2A v1.0 names it (a2a-sdk 1.3's generated stubs use the same name).
pub(super) const SERVICE: &str = "lf.a2a.v1.A2AService";

static POOL: LazyLock<DescriptorPool> = LazyLock::new(|| {
    DescriptorPool::decode(&include_bytes!(concat!(env!("OUT_DIR"), "/a2a_descriptors.bin"))[..])
        .expect("build.rs wrote a valid descriptor set")
});

/// The method a request path (`/lf.a2a.v1.A2AService/SendMessage`) names.
pub(super) fn method(path: &str) -> Option<MethodDescriptor> {
    let (service, name) = path.strip_prefix('/')?.split_once('/')?;
    if service != SERVICE {
        return None;
    }
    POOL.get_service_by_name(SERVICE)?
        .methods()
        .find(|m| m.name() == name)
}

/// The gRPC path of a method of the service.
pub(super) fn path(name: &str) -> String {
    format!("/{SERVICE}/{name}")
}

fn message_type(name: &str) -> MessageDescriptor {
    POOL.get_message_by_name(name)
        .unwrap_or_else(|| panic!("a2a.proto defines {name}"))
}

/// A message in its JSON form; the error says what is wrong with the bytes.
pub(super) fn decode(desc: &MessageDescriptor, bytes: &[u8]) -> Result<Value, String> {
    let msg = DynamicMessage::decode(desc.clone(), bytes)
        .map_err(|e| format!("not a valid {}: {e}", desc.full_name()))?;
    serde_json::to_value(&msg).map_err(|e| format!("{} as JSON: {e}", desc.full_name()))
}

/// A message from its JSON form. Fields the message does not have are left out: a
/// JSON-RPC agent's answer may carry more than the gRPC client can be given.
pub(super) fn encode(desc: &MessageDescriptor, json: &Value) -> Result<Vec<u8>, String> {
    let options = DeserializeOptions::new().deny_unknown_fields(false);
    let msg = DynamicMessage::deserialize_with_options(desc.clone(), json, &options)
        .map_err(|e| format!("not a valid {}: {e}", desc.full_name()))?;
    Ok(msg.encode_to_vec())
}

/// A `StreamResponse` (or a `SendMessageResponse`, whose fields are its first two) as the
/// frame the log records.
pub(super) fn stream_response(bytes: &[u8]) -> Result<Value, String> {
    decode(&message_type("lf.a2a.v1.StreamResponse"), bytes)
}

/// The details of a `google.rpc.Status` (`grpc-status-details-bin`) in JSON form.
pub(super) fn status_details_json(bytes: &[u8]) -> Option<Value> {
    let status = decode(&message_type("google.rpc.Status"), bytes).ok()?;
    status.get("details").filter(|d| d.is_array()).cloned()
}

/// The `google.rpc.Status` of an error body, with its details, as protobuf.
fn status_details(code: Code, message: &str, details: &Value) -> Option<Vec<u8>> {
    let details = details.as_array().filter(|d| !d.is_empty())?;
    let status = json!({ "code": code as i32, "message": message, "details": details });
    // Details whose type the pool does not know cannot be encoded; the status still can.
    encode(&message_type("google.rpc.Status"), &status).ok()
}

/// A2A's gRPC service, for the gateway's gRPC edge.
pub(super) struct A2aGrpc;

impl GrpcService for A2aGrpc {
    fn method(&self, path: &str) -> Option<Method> {
        method(path).map(|m| Method {
            server_streaming: m.is_server_streaming(),
        })
    }

    fn encode_response(&self, path: &str, json: &Value) -> Result<Vec<u8>, String> {
        let method = method(path).ok_or_else(|| format!("no method {path}"))?;
        encode(&method.output(), json)
    }

    fn status_of(&self, error: &Value) -> Status {
        let error = error.get("error").unwrap_or(error);
        let code = error["status"]
            .as_str()
            .and_then(Code::from_name)
            .or_else(|| error["code"].as_u64().map(|c| Code::from_http(c as u16)))
            .unwrap_or(Code::Unknown);
        let message = error["message"].as_str().unwrap_or_default().to_owned();
        Status {
            details: status_details(code, &message, &error["details"]),
            code,
            message,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_service_has_every_method_a2a_defines() {
        for (name, streaming) in [
            ("SendMessage", false),
            ("SendStreamingMessage", true),
            ("GetTask", false),
            ("ListTasks", false),
            ("CancelTask", false),
            ("SubscribeToTask", true),
            ("CreateTaskPushNotificationConfig", false),
            ("GetTaskPushNotificationConfig", false),
            ("ListTaskPushNotificationConfigs", false),
            ("DeleteTaskPushNotificationConfig", false),
            ("GetExtendedAgentCard", false),
        ] {
            let m = A2aGrpc.method(&path(name));
            assert_eq!(m.map(|m| m.server_streaming), Some(streaming), "{name}");
        }
        assert!(method("/a2a.v1.A2AService/SendMessage").is_none());
        assert!(method("/lf.a2a.v1.A2AService/Nope").is_none());
    }

    #[test]
    fn messages_round_trip_through_their_json_form() {
        let send = json!({
            "message": {
                "messageId": "m1", "contextId": "c1", "role": "ROLE_USER",
                "parts": [{ "text": "hi" }, { "data": { "a": [1.5, "two"] } }],
                "metadata": { "k": "v" },
            },
            "configuration": { "historyLength": 0, "acceptedOutputModes": ["text/plain"] },
        });
        let desc = method(&path("SendMessage")).unwrap().input();
        let bytes = encode(&desc, &send).unwrap();
        assert_eq!(decode(&desc, &bytes).unwrap(), send);

        let update = json!({ "statusUpdate": {
            "taskId": "t", "contextId": "c",
            "status": { "state": "TASK_STATE_COMPLETED", "timestamp": "2026-01-02T03:04:05.678Z" },
        }});
        let bytes = encode(&message_type("lf.a2a.v1.StreamResponse"), &update).unwrap();
        assert_eq!(stream_response(&bytes).unwrap(), update);
    }

    #[test]
    fn bad_bytes_say_which_message_they_are_not() {
        let desc = method(&path("GetTask")).unwrap().input();
        let e = decode(&desc, &[0x0a, 0xff]).unwrap_err();
        assert!(e.contains("lf.a2a.v1.GetTaskRequest"), "{e}");
    }

    #[test]
    fn errors_carry_their_details_as_a_google_rpc_status() {
        let body = json!({ "error": {
            "code": 404, "status": "NOT_FOUND", "message": "Task not found",
            "details": [{
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "TASK_NOT_FOUND", "domain": "a2a-protocol.org", "metadata": {},
            }],
        }});
        let status = A2aGrpc.status_of(&body);
        assert_eq!(status.code, Code::NotFound);
        assert_eq!(status.message, "Task not found");
        let details = decode(&message_type("google.rpc.Status"), &status.details.unwrap()).unwrap();
        assert_eq!(details["code"], 5);
        assert_eq!(details["details"][0]["reason"], "TASK_NOT_FOUND");
        // A JSON-RPC-style error names only a code.
        let status = A2aGrpc.status_of(&json!({ "error": { "code": 503, "message": "x" } }));
        assert_eq!(status.code, Code::Unavailable);
        assert_eq!(status.details, None);
    }
}
