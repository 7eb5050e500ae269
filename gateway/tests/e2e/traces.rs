//! OpenTelemetry traces through the real binary: an OTLP/HTTP receiver on loopback (the
//! protobuf decoded with the official opentelemetry-proto definitions) collects what
//! Tether exports; the tests assert the span tree, the GenAI and A2A attributes, and the
//! trace context the agent received.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value as Any;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::trace::v1::span::SpanKind;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::{json, Value};

use super::interop::interop_python;
use crate::harness::*;

const CLIENT_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const CLIENT_SPAN: &str = "00f067aa0ba902b7";

fn client_traceparent() -> String {
    format!("00-{CLIENT_TRACE}-{CLIENT_SPAN}-01")
}

/// A span as received, with its resource's attributes.
#[derive(Clone, Debug)]
struct Received {
    span: Span,
    resource: Vec<KeyValue>,
}

impl Received {
    fn trace_id(&self) -> String {
        hex(&self.span.trace_id)
    }
    fn id(&self) -> String {
        hex(&self.span.span_id)
    }
    fn parent(&self) -> String {
        hex(&self.span.parent_span_id)
    }
    fn attr(&self, key: &str) -> Option<String> {
        value(&self.span.attributes, key)
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn value(attributes: &[KeyValue], key: &str) -> Option<String> {
    let v = attributes.iter().find(|kv| kv.key == key)?.value.as_ref()?;
    Some(match v.value.as_ref()? {
        Any::StringValue(s) => s.clone(),
        Any::IntValue(i) => i.to_string(),
        Any::BoolValue(b) => b.to_string(),
        Any::DoubleValue(d) => d.to_string(),
        other => format!("{other:?}"),
    })
}

/// A minimal OTLP/HTTP receiver: `POST /v1/traces` with a protobuf body, answered 200.
struct Collector {
    port: u16,
    spans: Arc<Mutex<Vec<Received>>>,
}

impl Collector {
    fn start() -> Collector {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let spans = Arc::new(Mutex::new(Vec::new()));
        let store = spans.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                let Ok(stream) = stream else { continue };
                let store = store.clone();
                std::thread::spawn(move || serve_otlp(stream, &store));
            }
        });
        Collector { port, spans }
    }

    fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Waits until `found` holds for what was received; returns it.
    fn wait_for(&self, what: &str, found: impl Fn(&[Received]) -> bool) -> Vec<Received> {
        let start = Instant::now();
        loop {
            let spans = self.spans.lock().unwrap().clone();
            if found(&spans) {
                return spans;
            }
            assert!(
                start.elapsed() < Duration::from_secs(20),
                "no {what} among the exported spans: {:#?}",
                spans
                    .iter()
                    .map(|s| (&s.span.name, s.id(), s.parent()))
                    .collect::<Vec<_>>()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// One keep-alive connection of OTLP requests.
fn serve_otlp(stream: std::net::TcpStream, spans: &Mutex<Vec<Received>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let mut headers = HashMap::new();
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':') {
                headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_owned());
            }
        }
        let length: usize = headers["content-length"].parse().unwrap();
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        assert!(
            request_line.starts_with("POST /v1/traces "),
            "{request_line}"
        );
        assert_eq!(headers["content-type"], "application/x-protobuf");
        let export = ExportTraceServiceRequest::decode(body.as_slice()).expect("OTLP protobuf");
        let mut got = spans.lock().unwrap();
        for resource in export.resource_spans {
            let attributes = resource.resource.map(|r| r.attributes).unwrap_or_default();
            for scope in resource.scope_spans {
                for span in scope.spans {
                    got.push(Received {
                        span,
                        resource: attributes.clone(),
                    });
                }
            }
        }
        drop(got);
        writer
            .write_all(b"HTTP/1.1 200 OK\r\ncontent-type: application/x-protobuf\r\ncontent-length: 0\r\n\r\n")
            .unwrap();
    }
}

fn telemetry_conf(collector: &Collector, agent_name: &str) -> Conf {
    Conf::write(&format!(
        "[telemetry]\notlp_endpoint = \"{}\"\nagent_name = \"{agent_name}\"\n",
        collector.endpoint()
    ))
}

/// Exports within a tenth of a second (the batch processor's default waits 5 s).
const FAST_EXPORT: [(&str, &str); 1] = [("OTEL_BSP_SCHEDULE_DELAY", "100")];

/// `(trace id, parent span id)` of a `traceparent` header.
fn parse_traceparent(value: &str) -> (String, String) {
    let parts: Vec<&str> = value.split('-').collect();
    assert_eq!(parts.len(), 4, "{value}");
    (parts[1].to_owned(), parts[2].to_owned())
}

fn children<'a>(spans: &'a [Received], parent: &Received) -> Vec<&'a Received> {
    spans.iter().filter(|s| s.parent() == parent.id()).collect()
}

#[test]
fn a_run_and_a_pass_through_request_are_traced_and_the_agent_gets_the_trace() {
    let collector = Collector::start();
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let conf = telemetry_conf(&collector, "fake-agent");
    let tether = Tether::start_with_env(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--conf", &conf.arg()],
        &FAST_EXPORT,
    );
    let traceparent = client_traceparent();
    let reply = post(
        &format!("{}/v1/chat/completions", tether.url()),
        &json!({ "model": "fake", "messages": [{ "role": "user", "content": "Reply with OK" }] })
            .to_string(),
        &[("traceparent", &traceparent), ("x-session-id", "otel-chat")],
    );
    assert_eq!(reply.status, 200, "{}", reply.body);
    let run_id = reply.header("x-run-id").unwrap().to_owned();
    let echo = get(
        &format!("{}/echo", tether.url()),
        &[("traceparent", &traceparent)],
    );
    assert_eq!(echo.status, 200);

    let spans = collector.wait_for("run and pass-through spans", |spans| {
        spans
            .iter()
            .any(|s| s.span.name == "invoke_agent fake-agent")
            && spans.iter().any(|s| s.attr("tether.path").is_some())
            && spans
                .iter()
                .filter(|s| s.span.name == "session_log commit")
                .count()
                >= 2
    });

    // The run: a CLIENT span in the client's trace, a child of the client's span, with the
    // GenAI attributes.
    let run = spans
        .iter()
        .find(|s| s.span.name == "invoke_agent fake-agent")
        .unwrap();
    assert_eq!(run.span.kind, SpanKind::Client as i32);
    assert_eq!(
        (run.trace_id(), run.parent()),
        (CLIENT_TRACE.to_owned(), CLIENT_SPAN.to_owned())
    );
    for (key, expected) in [
        ("gen_ai.operation.name", "invoke_agent"),
        ("gen_ai.provider.name", "openai"),
        ("gen_ai.agent.name", "fake-agent"),
        ("gen_ai.conversation.id", "otel-chat"),
        ("gen_ai.request.model", "fake"),
        ("server.address", "127.0.0.1"),
        ("server.port", &agent.port.to_string()),
        ("tether.run_id", &run_id),
        ("tether.run.status", "completed"),
    ] {
        assert_eq!(run.attr(key).as_deref(), Some(expected), "{key}");
    }
    let tokens: i64 = run
        .attr("gen_ai.usage.input_tokens")
        .unwrap()
        .parse()
        .unwrap();
    assert!(tokens > 0);
    assert!(run.attr("gen_ai.usage.output_tokens").is_some());
    assert!(run.attr("a2a.method.name").is_none(), "not an A2A run");
    assert_eq!(
        value(&run.resource, "service.name").as_deref(),
        Some("tether")
    );

    // Its children: the request to the agent, and the commits that started and ended it.
    let kids = children(&spans, run);
    let call = kids
        .iter()
        .find(|s| s.span.name == "POST")
        .expect("the agent request");
    assert_eq!(call.span.kind, SpanKind::Client as i32);
    assert_eq!(
        call.attr("url.path").as_deref(),
        Some("/v1/chat/completions")
    );
    assert_eq!(
        call.attr("http.response.status_code").as_deref(),
        Some("200")
    );
    let mut commits: Vec<String> = kids
        .iter()
        .filter(|s| s.span.name == "session_log commit")
        .map(|s| s.attr("tether.commit").unwrap())
        .collect();
    commits.sort();
    assert_eq!(commits, ["run_end", "run_start"]);
    assert!(kids
        .iter()
        .all(|s| s.attr("db.system.name").as_deref() != Some("postgresql")));

    // The agent got the client's trace, with the request span as its parent.
    let request = agent.requests().pop().unwrap();
    let (trace, parent) = parse_traceparent(request["headers"]["traceparent"].as_str().unwrap());
    assert_eq!((trace, parent), (CLIENT_TRACE.to_owned(), call.id()));

    // A pass-through request: one CLIENT span, a child of the client's, whose context the
    // agent received instead of the client's.
    let pass = spans
        .iter()
        .find(|s| s.attr("tether.path").is_some())
        .unwrap();
    assert_eq!(pass.span.name, "GET");
    assert_eq!(pass.span.kind, SpanKind::Client as i32);
    assert_eq!(
        (pass.trace_id(), pass.parent()),
        (CLIENT_TRACE.to_owned(), CLIENT_SPAN.to_owned())
    );
    assert_eq!(pass.attr("url.path").as_deref(), Some("/echo"));
    assert_eq!(
        pass.attr("http.response.status_code").as_deref(),
        Some("200")
    );
    let echoed: Value = echo.json();
    let (trace, parent) = parse_traceparent(echoed["headers"]["traceparent"].as_str().unwrap());
    assert_eq!((trace, parent), (CLIENT_TRACE.to_owned(), pass.id()));
    // The log output shows none of it.
    assert!(
        !tether.log_text().contains("invoke_agent"),
        "{}",
        tether.log_text()
    );
}

/// A real a2a-sdk agent (tests/agents/a2a_agent.py) in front of the fake LLM.
pub struct A2aAgent {
    child: Child,
}

impl A2aAgent {
    pub fn start(python: &str, port: u16, llm: &str) -> A2aAgent {
        A2aAgent::start_with(python, port, None, llm)
    }

    /// With `grpc_port`, the agent serves gRPC there too.
    pub fn start_with(python: &str, port: u16, grpc_port: Option<u16>, llm: &str) -> A2aAgent {
        let mut command = Command::new(python);
        command
            .arg(repo_root().join("tests/agents/a2a_agent.py"))
            .args(["--port", &port.to_string(), "--llm", llm])
            .stderr(Stdio::null());
        if let Some(g) = grpc_port {
            command.args(["--grpc-port", &g.to_string()]);
        }
        A2aAgent {
            child: spawn_ready(command, "a2a agent"),
        }
    }
}

impl A2aAgent {
    /// Kills the agent with SIGKILL: it forgets every task.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for A2aAgent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn message_send(url: &str, context: &str, text: &str) -> Value {
    let body = json!({ "jsonrpc": "2.0", "id": "1", "method": "message/send", "params": { "message": {
        "kind": "message", "role": "user", "messageId": uuid::Uuid::new_v4().to_string(),
        "parts": [{ "kind": "text", "text": text }], "contextId": context } } });
    let traceparent = client_traceparent();
    let r = post(
        &format!("{url}/"),
        &body.to_string(),
        &[("traceparent", &traceparent)],
    );
    assert_eq!(r.status, 200, "{}", r.body);
    r.json()
}

/// An A2A run has the A2A attributes; after the agent restarts (forgetting the
/// conversation), the next run's restore is a child span with its own agent requests.
#[test]
fn a2a_runs_carry_the_task_and_a_restore_is_a_child_span() {
    let Some(python) = interop_python() else {
        return;
    };
    let collector = Collector::start();
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let llm = FakeAgent::start();
    let port = free_port();
    let agent = A2aAgent::start(&python, port, &llm.url());
    let conf = telemetry_conf(&collector, "a2a-agent");
    let tether = Tether::start_with_env(
        &format!("http://127.0.0.1:{port}"),
        "a2a",
        &store.url,
        &["--conf", &conf.arg()],
        &FAST_EXPORT,
    );
    let first = message_send(&tether.url(), "otel-a2a", "My project is named zebra42.");
    let task = first["result"]["id"].as_str().expect("a task").to_owned();
    assert_eq!(first["result"]["status"]["state"], "completed");
    drop(agent);
    let _agent = A2aAgent::start(&python, port, &llm.url());
    let second = message_send(&tether.url(), "otel-a2a", "What is my project named?");
    assert_eq!(second["result"]["status"]["state"], "completed");

    let spans = collector.wait_for("two A2A runs and a restore", |spans| {
        spans
            .iter()
            .filter(|s| s.span.name == "invoke_agent a2a-agent")
            .count()
            == 2
            && spans.iter().any(|s| s.span.name == "restore_session")
    });
    let runs: Vec<&Received> = spans
        .iter()
        .filter(|s| s.span.name == "invoke_agent a2a-agent")
        .collect();
    let first_run = runs
        .iter()
        .find(|s| s.attr("a2a.task.id").as_deref() == Some(task.as_str()))
        .expect("the first run names its task");
    for run in &runs {
        assert_eq!(run.span.kind, SpanKind::Client as i32);
        assert_eq!(
            (run.trace_id(), run.parent()),
            (CLIENT_TRACE.to_owned(), CLIENT_SPAN.to_owned())
        );
        assert_eq!(run.attr("gen_ai.provider.name").as_deref(), Some("a2a"));
        assert_eq!(
            run.attr("gen_ai.conversation.id").as_deref(),
            Some("otel-a2a")
        );
        assert_eq!(run.attr("a2a.method.name").as_deref(), Some("message/send"));
        assert_eq!(run.attr("a2a.task.state").as_deref(), Some("completed"));
        assert!(run.attr("a2a.task.id").is_some());
    }
    let second_run = runs.iter().find(|s| s.id() != first_run.id()).unwrap();
    let restore = children(&spans, second_run)
        .into_iter()
        .find(|s| s.span.name == "restore_session")
        .expect("the restore is a child of the second run");
    assert_eq!(
        restore.attr("tether.restore.reason").as_deref(),
        Some("agent_forgot")
    );
    let restore_requests = children(&spans, restore);
    assert!(
        !restore_requests.is_empty() && restore_requests.iter().all(|s| s.span.name == "POST"),
        "the restore's requests to the agent are its children: {restore_requests:?}"
    );
    assert!(children(&spans, first_run)
        .iter()
        .all(|s| s.span.name != "restore_session"));
}

/// With no endpoint configured, nothing is exported and the agent gets no trace context
/// from a run (pass-through still forwards the client's own headers).
#[test]
fn traces_are_off_by_default() {
    let collector = Collector::start();
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let tether = Tether::start_with_env(&agent.url(), "openai-chat", &store.url, &[], &FAST_EXPORT);
    let traceparent = client_traceparent();
    let reply = post(
        &format!("{}/v1/chat/completions", tether.url()),
        &json!({ "model": "fake", "messages": [{ "role": "user", "content": "hi" }] }).to_string(),
        &[("traceparent", &traceparent)],
    );
    assert_eq!(reply.status, 200);
    let request = agent.requests().pop().unwrap();
    assert!(request["headers"].get("traceparent").is_none(), "{request}");
    let echo = get(
        &format!("{}/echo", tether.url()),
        &[("traceparent", &traceparent)],
    );
    assert_eq!(echo.json()["headers"]["traceparent"], traceparent.as_str());
    std::thread::sleep(Duration::from_millis(500));
    assert!(collector.spans.lock().unwrap().is_empty());
}

/// The standard variables: an endpoint in the environment turns traces on (and wins over
/// the file's), `OTEL_SDK_DISABLED` turns them off, `OTEL_SERVICE_NAME` names the
/// service, and a protocol Tether does not export is a configuration error.
#[test]
fn standard_otel_variables_are_honoured() {
    let collector = Collector::start();
    let unused = Collector::start();
    let store = TestStore::new(StoreKind::Sqlite).unwrap();
    let agent = FakeAgent::start();
    let traces_url = format!("{}/v1/traces", collector.endpoint());
    let conf = telemetry_conf(&unused, "from-file");
    let tether = Tether::start_with_env(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--conf", &conf.arg()],
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", &traces_url),
            ("OTEL_SERVICE_NAME", "tether-east"),
        ],
    );
    let reply = post_json(
        &format!("{}/v1/responses", tether.url()),
        &Surface::Responses.body("hi", None, false),
    );
    assert_eq!(reply.status, 200);
    let spans = collector.wait_for("a run span", |spans| {
        spans
            .iter()
            .any(|s| s.span.name == "invoke_agent from-file")
    });
    let run = spans
        .iter()
        .find(|s| s.span.name == "invoke_agent from-file")
        .unwrap();
    assert_eq!(
        value(&run.resource, "service.name").as_deref(),
        Some("tether-east")
    );
    assert!(run.parent().is_empty(), "no client trace: a root span");
    assert!(
        unused.spans.lock().unwrap().is_empty(),
        "the variable wins over the file"
    );

    let off = Tether::start_with_env(
        &agent.url(),
        "openai-chat",
        &store.url,
        &["--conf", &conf.arg()],
        &[
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_SDK_DISABLED", "true"),
        ],
    );
    let reply = post_json(
        &format!("{}/v1/responses", off.url()),
        &Surface::Responses.body("hi", None, false),
    );
    assert_eq!(reply.status, 200);
    std::thread::sleep(Duration::from_millis(500));
    assert!(unused.spans.lock().unwrap().is_empty(), "OTEL_SDK_DISABLED");

    let out = Command::new(env!("CARGO_BIN_EXE_tether"))
        .args(["serve", "--upstream", &agent.url(), "--store", &store.url])
        .args(["--listen", &format!("127.0.0.1:{}", free_port())])
        .env("OTEL_EXPORTER_OTLP_ENDPOINT", collector.endpoint())
        .env("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr),
        "tether: configuration key `OTEL_EXPORTER_OTLP_PROTOCOL`: \"grpc\": Tether exports OTLP over HTTP with protobuf (http/protobuf)\n"
    );
}
