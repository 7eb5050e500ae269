//! The client's requests: which paths the ADK surface claims, `/run` and `/run_sse`
//! bodies as turns, the session API forwarded to the caller's namespaced user, and
//! FastAPI's answers (404, 405, 422) to what api_server itself would refuse.

use serde_json::{json, Map, Value};

use super::content::message_items;
use super::namespace::agent_user_id;
use super::{alias, field_str, FINALIZE_IDENTITY, RUN, RUN_LIVE, RUN_SSE};
use crate::percent::{decode_segment, encode_segment};
use crate::protocol::Protocol;
use crate::surface::{forward, static_method, ClientRequest, Route};
use crate::turn::{InputError, SessionRef, TurnRequest};

pub(super) fn claims(method: &str, path: &str) -> bool {
    match path {
        RUN | RUN_SSE | FINALIZE_IDENTITY => method.eq_ignore_ascii_case("POST"),
        // A websocket naming its user in the query: claimed only to be refused.
        RUN_LIVE => true,
        _ => split_user_path(path).is_some(),
    }
}

pub(super) fn route(req: &ClientRequest) -> Route {
    match req.path {
        RUN => run_route(req, RUN),
        RUN_SSE => run_route(req, RUN_SSE),
        RUN_LIVE => detail(
            501,
            "Live runs (/run_live) are not available through Tether; use /run or /run_sse.",
        ),
        FINALIZE_IDENTITY => finalize_route(req),
        path => match user_path(path) {
            Some((app, user, rest)) => session_route(req, app, user, rest),
            None => not_found(),
        },
    }
}

/// The session a request deletes: `DELETE /apps/{app}/users/{user}/sessions/{id}` (as
/// `route` forwards it), the id decoded as the agent reads it.
pub(super) fn deletes_session(req: &ClientRequest) -> Option<String> {
    if !req.method.eq_ignore_ascii_case("DELETE") {
        return None;
    }
    let (_, _, rest) = user_path(req.path)?;
    let session = rest.strip_prefix("/sessions/")?;
    (!session.is_empty() && !session.contains('/')).then(|| decode_segment(session))
}

/// A `/run` body as `Surface::parse_request` returns it: the first pydantic error as an
/// `InputError`.
pub(super) fn parse_request(body: &[u8]) -> Result<TurnRequest, InputError> {
    parse_run(body, RUN).map_err(|errors| {
        let first = errors.first().cloned().unwrap_or(Value::Null);
        InputError {
            message: first["msg"]
                .as_str()
                .unwrap_or("Invalid request")
                .to_owned(),
            param: first["loc"]
                .get(1)
                .and_then(Value::as_str)
                .map(str::to_owned),
            code: "invalid_request",
        }
    })
}

// ---------------------------------------------------------------------------------------
// Runs
// ---------------------------------------------------------------------------------------

fn run_route(req: &ClientRequest, path: &'static str) -> Route {
    if !req.method.eq_ignore_ascii_case("POST") {
        return method_not_allowed();
    }
    match parse_run(req.body, path) {
        Ok(turn) => Route::Run(turn),
        Err(errors) => unprocessable(errors),
    }
}

/// A `/run` or `/run_sse` body as a turn, or pydantic's errors for it.
fn parse_run(body: &[u8], path: &'static str) -> Result<TurnRequest, Vec<Value>> {
    if body.trim_ascii().is_empty() {
        return Err(vec![
            json!({ "type": "missing", "loc": ["body"], "msg": "Field required", "input": null }),
        ]);
    }
    let doc: Value = serde_json::from_slice(body).map_err(|e| vec![json_invalid(body, &e)])?;
    let Value::Object(obj) = &doc else {
        return Err(vec![not_an_object(json!(["body"]), &doc)]);
    };
    let mut errors = Vec::new();
    let app = string_field(obj, "app_name", "appName", false, &mut errors);
    let user = string_field(obj, "user_id", "userId", true, &mut errors).unwrap_or_default();
    let session =
        string_field(obj, "session_id", "sessionId", true, &mut errors).unwrap_or_default();
    let message_key = alias(obj, "new_message", "newMessage");
    let message = obj.get(message_key).filter(|m| !m.is_null());
    if let Some(m) = message.filter(|m| !m.is_object()) {
        errors.push(not_an_object(json!(["body", message_key]), m));
    }
    if !errors.is_empty() {
        return Err(errors);
    }
    let mut turn = TurnRequest::new(Protocol::Adk);
    turn.model = app.clone();
    turn.session = SessionRef::Named(session.clone());
    turn.input = message.map(message_items).unwrap_or_default();
    turn.stream = path == RUN_SSE;
    turn.extra.insert(
        "client".into(),
        json!({ "path": path, "app_name": app, "user_id": user, "session_id": session }),
    );
    // The client's own body (its own user id): the upstream namespaces it per call.
    turn.extra
        .insert("adk".into(), json!({ "path": path, "body": doc }));
    Ok(turn)
}

/// A string field as pydantic checks it: errors name the key given, or the alias when
/// a required field is missing; an optional one may be `null`.
fn string_field(
    obj: &Map<String, Value>,
    snake: &str,
    camel: &str,
    required: bool,
    errors: &mut Vec<Value>,
) -> Option<String> {
    let key = alias(obj, snake, camel);
    match obj.get(key) {
        Some(Value::String(s)) => return Some(s.clone()),
        None | Some(Value::Null) if !required => {}
        None => errors.push(
            json!({ "type": "missing", "loc": ["body", camel], "msg": "Field required", "input": obj }),
        ),
        Some(other) => errors.push(
            json!({ "type": "string_type", "loc": ["body", key], "msg": "Input should be a valid string", "input": other }),
        ),
    }
    None
}

// ---------------------------------------------------------------------------------------
// Requests forwarded to the agent
// ---------------------------------------------------------------------------------------

/// `/apps/{app}/users/{user}{rest}` split into its raw (still escaped) parts.
fn split_user_path(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix("/apps/")?;
    let (app, rest) = rest.split_once('/')?;
    let rest = rest.strip_prefix("users/")?;
    let (user, rest) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    Some((app, user, rest))
}

/// `split_user_path` for a path that is safe to forward, `rest` without a trailing slash
/// (FastAPI would answer that with a redirect naming the namespaced user); `None` for a
/// path that could name some other user once the agent (or anything between) decodes or
/// normalises it.
fn user_path(path: &str) -> Option<(&str, &str, &str)> {
    let (app, user, rest) = split_user_path(path)?;
    // The app segment comes before the user: an escaped `/` in it would let the decoded
    // path name some other user.
    let moves = app.is_empty()
        || user.is_empty()
        || decode_segment(app).contains(['/', '\\'])
        || is_dot_segment(app)
        || is_dot_segment(user)
        || rest.split('/').any(is_dot_segment);
    (!moves).then(|| (app, user, rest.strip_suffix('/').unwrap_or(rest)))
}

fn is_dot_segment(raw: &str) -> bool {
    let decoded = decode_segment(raw);
    decoded == "." || decoded == ".."
}

/// A request under `/apps/{app}/users/{user}/…`, sent on with the user namespaced.
fn session_route(req: &ClientRequest, app: &str, user: &str, rest: &str) -> Route {
    let Some(method) = static_method(req.method) else {
        return method_not_allowed();
    };
    let body = match json_body(req.body) {
        Ok(b) => b,
        Err(errors) => return unprocessable(errors),
    };
    let user = agent_user_id(req.account_id, &decode_segment(user));
    let path = format!("/apps/{app}/users/{}{rest}", encode_segment(&user));
    forward(req, method, path, body)
}

/// `POST /agent-identity/finalize`: its body names the user.
fn finalize_route(req: &ClientRequest) -> Route {
    let mut body = match json_body(req.body) {
        Ok(b) => b,
        Err(errors) => return unprocessable(errors),
    };
    if let Some(Value::Object(obj)) = &mut body {
        if let Some(user) = field_str(obj, "user_id", "userId").map(str::to_owned) {
            obj.remove("userId");
            obj.insert(
                "user_id".into(),
                agent_user_id(req.account_id, &user).into(),
            );
        }
    }
    forward(req, "POST", FINALIZE_IDENTITY.to_owned(), body)
}

/// A request body for the agent: none when empty, JSON otherwise.
fn json_body(body: &[u8]) -> Result<Option<Value>, Vec<Value>> {
    if body.trim_ascii().is_empty() {
        return Ok(None);
    }
    serde_json::from_slice(body)
        .map(Some)
        .map_err(|e| vec![json_invalid(body, &e)])
}

// ---------------------------------------------------------------------------------------
// FastAPI's answers
// ---------------------------------------------------------------------------------------

fn detail(status: u16, detail: impl Into<Value>) -> Route {
    Route::Reply {
        status,
        body: json!({ "detail": detail.into() }),
    }
}

/// The answer to a path FastAPI has no route for.
fn not_found() -> Route {
    detail(404, "Not Found")
}

fn method_not_allowed() -> Route {
    detail(405, "Method Not Allowed")
}

/// The 422 answer: `{"detail": [<pydantic error>, …]}`.
fn unprocessable(errors: Vec<Value>) -> Route {
    detail(422, errors)
}

/// The pydantic error for a body that is not JSON (`loc` holds the byte offset).
fn json_invalid(body: &[u8], e: &serde_json::Error) -> Value {
    let offset: usize = body
        .split(|&b| b == b'\n')
        .take(e.line().saturating_sub(1))
        .map(|l| l.len() + 1)
        .sum::<usize>()
        + e.column().saturating_sub(1);
    json!({
        "type": "json_invalid",
        "loc": ["body", offset],
        "msg": "JSON decode error",
        "input": {},
        "ctx": { "error": e.to_string() },
    })
}

/// The pydantic error for a value at `loc` that should be an object.
fn not_an_object(loc: Value, input: &Value) -> Value {
    json!({
        "type": "model_attributes_type",
        "loc": loc,
        "msg": "Input should be a valid dictionary or object to extract fields from",
        "input": input,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use crate::adk::test_support::*;
    use crate::adk::AdkSurface;
    use crate::protocol::Protocol;
    use crate::surface::Surface;
    use crate::surface::{ClientRequest, Route};
    use crate::turn::SessionRef;

    #[test]
    fn claims_runs_and_everything_under_a_user() {
        let s = AdkSurface;
        assert!(s.claims("POST", "/run"));
        assert!(s.claims("POST", "/run_sse"));
        assert!(!s.claims("GET", "/run"));
        assert!(s.claims("GET", "/run_live"));
        assert!(s.claims("POST", "/agent-identity/finalize"));
        for m in ["GET", "POST", "DELETE", "PATCH"] {
            assert!(s.claims(m, "/apps/a/users/u/sessions"));
            assert!(s.claims(m, "/apps/a/users/u/sessions/s1"));
        }
        assert!(s.claims("GET", "/apps/a/users/u/sessions/s1/artifacts/x/versions"));
        assert!(s.claims("PATCH", "/apps/a/users/u/memory"));
        assert!(!s.claims("GET", "/list-apps"));
        assert!(!s.claims("GET", "/apps/a/app-info"));
        assert!(!s.claims("GET", "/health"));
        assert!(!s.claims("POST", "/v1/chat/completions"));
    }

    #[test]
    fn a_run_body_becomes_a_turn() {
        let turn = run_turn("/run", body("s-run", "My project is named zebra42."));
        assert_eq!(turn.surface, Protocol::Adk);
        assert_eq!(turn.session, SessionRef::Named("s-run".into()));
        assert_eq!(
            turn.input,
            vec![crate::item::Item::user_text("My project is named zebra42.")]
        );
        assert!(!turn.stream);
        assert_eq!(turn.model.as_deref(), Some("adk_agent"));
        assert_eq!(
            turn.extra["client"],
            json!({"path": "/run", "app_name": "adk_agent", "user_id": "u1", "session_id": "s-run"})
        );
        assert_eq!(turn.extra["adk"]["path"], "/run");
        assert_eq!(
            turn.extra["adk"]["body"],
            body("s-run", "My project is named zebra42.")
        );

        let turn = run_turn("/run_sse", body("s-sse", "hi"));
        assert!(turn.stream);
        assert_eq!(turn.extra["client"]["path"], "/run_sse");
    }

    #[test]
    fn camel_case_bodies_are_read_and_the_alias_wins() {
        let turn = run_turn(
            "/run",
            json!({"appName": "adk_agent", "userId": "u1", "sessionId": "s-run",
                   "newMessage": {"role": "user", "parts": [{"text": "Reply with OK"}]}}),
        );
        assert_eq!(turn.session, SessionRef::Named("s-run".into()));
        assert_eq!(
            turn.input,
            vec![crate::item::Item::user_text("Reply with OK")]
        );
        assert_eq!(turn.extra["client"]["user_id"], "u1");
        assert_eq!(turn.extra["client"]["app_name"], "adk_agent");

        // pydantic takes the alias when both spellings are given.
        let turn = run_turn(
            "/run",
            json!({"user_id": "a", "userId": "b", "session_id": "s", "sessionId": "t"}),
        );
        assert_eq!(turn.session, SessionRef::Named("t".into()));
        assert_eq!(turn.extra["client"]["user_id"], "b");
        assert!(turn.input.is_empty());
    }

    #[test]
    fn bad_run_bodies_get_fastapi_422s() {
        let (status, b) = reply(route(
            "POST",
            "/run",
            r#"{"app_name": "a", "user_id": "u1"}"#,
            "acct",
        ));
        assert_eq!(status, 422);
        assert_eq!(
            b,
            json!({"detail": [{"type": "missing", "loc": ["body", "sessionId"], "msg": "Field required",
                               "input": {"app_name": "a", "user_id": "u1"}}]})
        );

        let (status, b) = reply(route("POST", "/run_sse", r#"{"user_id": 5}"#, "acct"));
        assert_eq!(status, 422);
        let errors = b["detail"].as_array().unwrap();
        assert_eq!(errors.len(), 2);
        assert_eq!(errors[0]["type"], "string_type");
        assert_eq!(errors[0]["loc"], json!(["body", "user_id"]));
        assert_eq!(errors[1]["loc"], json!(["body", "sessionId"]));

        let (status, b) = reply(route("POST", "/run", "{\"user_id\": ", "acct"));
        assert_eq!(status, 422);
        assert_eq!(b["detail"][0]["type"], "json_invalid");
        assert_eq!(b["detail"][0]["msg"], "JSON decode error");

        let (_, b) = reply(route("POST", "/run", "", "acct"));
        assert_eq!(
            b["detail"][0],
            json!({"type": "missing", "loc": ["body"], "msg": "Field required", "input": null})
        );

        let (_, b) = reply(route("POST", "/run", "[1]", "acct"));
        assert_eq!(b["detail"][0]["type"], "model_attributes_type");

        let (_, b) = reply(route(
            "POST",
            "/run",
            r#"{"user_id": "u", "session_id": "s", "newMessage": "hi"}"#,
            "acct",
        ));
        assert_eq!(b["detail"][0]["loc"], json!(["body", "newMessage"]));

        let e = AdkSurface
            .parse_request(br#"{"user_id": "u"}"#, None)
            .unwrap_err();
        assert_eq!(e.param.as_deref(), Some("sessionId"));
        assert_eq!(e.message, "Field required");
    }

    #[test]
    fn optional_and_required_strings_check_like_pydantic() {
        // A null app name is no app name; a null user id is not a string.
        let (status, b) = reply(route(
            "POST",
            "/run",
            r#"{"appName": null, "userId": null, "session_id": "s", "app_name": 3}"#,
            "acct",
        ));
        assert_eq!(status, 422);
        assert_eq!(
            b["detail"],
            json!([{"type": "string_type", "loc": ["body", "userId"], "msg": "Input should be a valid string", "input": null}])
        );
        let (_, b) = reply(route(
            "POST",
            "/run",
            r#"{"app_name": 3, "user_id": "u", "session_id": "s"}"#,
            "acct",
        ));
        assert_eq!(b["detail"][0]["loc"], json!(["body", "app_name"]));
    }

    #[test]
    fn run_live_is_refused_rather_than_passed_through() {
        // It names its user in the query string, where Tether cannot bind it.
        let (status, b) = reply(route("GET", "/run_live", "", "acct"));
        assert_eq!(status, 501);
        assert!(b["detail"].as_str().unwrap().contains("/run_sse"));
    }

    #[test]
    fn session_requests_are_forwarded_to_the_namespaced_user() {
        let req = forward(
            "POST",
            "/apps/adk_agent/users/u1/sessions",
            r#"{"session_id": "s-run"}"#,
            "acct",
        );
        assert_eq!(req.method, "POST");
        assert_eq!(req.path, "/apps/adk_agent/users/acct~u1/sessions");
        assert_eq!(req.body, Some(json!({"session_id": "s-run"})));

        let req = forward("POST", "/apps/adk_agent/users/u1/sessions", "", "acct");
        assert_eq!(req.body, None);

        let req = forward("GET", "/apps/adk_agent/users/u1/sessions/s-run", "", "acct");
        assert_eq!(
            (req.method, req.path.as_str()),
            ("GET", "/apps/adk_agent/users/acct~u1/sessions/s-run")
        );

        let req = forward(
            "DELETE",
            "/apps/adk_agent/users/u1/sessions/s-run/",
            "",
            "acct",
        );
        assert_eq!(
            (req.method, req.path.as_str()),
            ("DELETE", "/apps/adk_agent/users/acct~u1/sessions/s-run")
        );

        let raw = request(
            "GET",
            "/apps/a/users/u%201/sessions/s1/artifacts/dir/f.txt",
            b"",
            "acct",
        );
        let raw = ClientRequest {
            query: Some("version=2"),
            ..raw
        };
        let Route::Forward(req) = AdkSurface.route(&raw) else {
            panic!()
        };
        assert_eq!(
            req.path,
            "/apps/a/users/acct~u%201/sessions/s1/artifacts/dir/f.txt?version=2"
        );

        let (status, b) = reply(route("POST", "/apps/a/users/u/sessions", "{nope", "acct"));
        assert_eq!(status, 422);
        assert_eq!(b["detail"][0]["type"], "json_invalid");
        assert_eq!(
            reply(route("TRACE", "/apps/a/users/u/sessions", "", "acct")).0,
            405
        );
    }

    #[test]
    fn no_path_reaches_another_accounts_user() {
        // Two accounts with the same user and session ids go to different agent users.
        let a = forward("GET", "/apps/app/users/u1/sessions/s1", "", "alice");
        let b = forward("GET", "/apps/app/users/u1/sessions/s1", "", "bob");
        assert_ne!(a.path, b.path);
        // Naming another account's namespaced user lands inside one's own.
        let req = forward("GET", "/apps/app/users/alice~u1/sessions/s1", "", "bob");
        assert_eq!(req.path, "/apps/app/users/bob~alice~u1/sessions/s1");
        let req = forward("GET", "/apps/app/users/alice%7Eu1/sessions", "", "bob");
        assert_eq!(req.path, "/apps/app/users/bob~alice~u1/sessions");
        // A slash smuggled into the user stays inside the segment.
        let req = forward(
            "GET",
            "/apps/app/users/x%2F..%2F..%2Fusers%2Falice~u1/sessions",
            "",
            "bob",
        );
        assert_eq!(
            req.path,
            "/apps/app/users/bob~x%2F..%2F..%2Fusers%2Falice~u1/sessions"
        );
        // Paths that would move the user once decoded or normalised are refused.
        for path in [
            "/apps/x%2Fusers%2Falice~u1%2Fsessions%2Fs1%2Fartifacts/users/u/f",
            "/apps/../users/u/sessions",
            "/apps/app/users/../sessions",
            "/apps/app/users/u/sessions/%2e%2e/%2E%2E/x",
            "/apps/app/users//sessions",
            "/apps//users/u/sessions",
        ] {
            assert_eq!(
                reply(route("GET", path, "", "bob")),
                (404, json!({"detail": "Not Found"})),
                "{path}"
            );
        }
        // The finalize body's user is bound too.
        let req = forward(
            "POST",
            "/agent-identity/finalize",
            r#"{"userId": "alice~u1", "user_id": "x", "consent_nonce": "n"}"#,
            "bob",
        );
        assert_eq!(
            req.body,
            Some(json!({"user_id": "bob~alice~u1", "consent_nonce": "n"}))
        );
    }

    #[test]
    fn deleting_a_session_names_it() {
        let deletes = |method: &str, path: &str| {
            AdkSurface.deletes_session(&request(method, path, b"", "acct"))
        };
        let s1 = Some("s1".to_owned());
        assert_eq!(deletes("DELETE", "/apps/a/users/u1/sessions/s1"), s1);
        assert_eq!(deletes("delete", "/apps/a/users/u1/sessions/s1/"), s1);
        // The id as the agent reads it (Starlette decodes path parameters).
        assert_eq!(
            deletes("DELETE", "/apps/a/users/u1/sessions/s%201"),
            Some("s 1".to_owned())
        );
        for (method, path) in [
            ("GET", "/apps/a/users/u1/sessions/s1"),
            ("POST", "/apps/a/users/u1/sessions/s1"),
            ("DELETE", "/apps/a/users/u1/sessions"),
            ("DELETE", "/apps/a/users/u1/sessions/"),
            ("DELETE", "/apps/a/users/u1/sessions/s1/artifacts/f"),
            ("DELETE", "/apps/a/users/u1/memory/s1"),
            // Refused with a 404 rather than forwarded: deletes nothing.
            ("DELETE", "/apps/a/users/u1/sessions/%2e%2e"),
            ("DELETE", "/apps/../users/u1/sessions/s1"),
            ("DELETE", "/run"),
        ] {
            assert_eq!(deletes(method, path), None, "{method} {path}");
        }
    }
}
