//! The account binding of ADK user ids (`<escaped account>~<user>`, what the agent sees),
//! and its removal from relayed answers.

use percent_encoding::{utf8_percent_encode, AsciiSet, NON_ALPHANUMERIC};
use serde_json::Value;

/// Separates the account from the client's user id in the id the agent sees. Unreserved
/// in URLs (so paths stay readable) and escaped out of the account part.
const SEPARATOR: char = '~';

/// The user id the agent sees for `user` of `account_id`.
pub fn agent_user_id(account_id: &str, user: &str) -> String {
    format!("{}{user}", user_prefix(account_id))
}

/// The client's user id behind an agent user id, when it is in `account_id`'s namespace.
pub fn client_user_id<'a>(account_id: &str, agent_user: &'a str) -> Option<&'a str> {
    agent_user.strip_prefix(user_prefix(account_id).as_str())
}

/// What an account keeps unescaped in the prefix: `[A-Za-z0-9._-]`, so never the `~`.
const ACCOUNT_ESCAPED: &AsciiSet = &NON_ALPHANUMERIC.remove(b'-').remove(b'.').remove(b'_');

/// `<escaped account>~`. The account is escaped down to `[A-Za-z0-9._-]` so the first `~`
/// always ends it: distinct accounts never share a prefix, whatever their ids hold.
fn user_prefix(account_id: &str) -> String {
    let mut p = utf8_percent_encode(account_id, ACCOUNT_ESCAPED).to_string();
    p.push(SEPARATOR);
    p
}

/// Removes the caller's namespace from a relayed answer: the `userId` of session objects
/// (one or a list), and the namespace anywhere in an error `detail`.
pub(super) fn unscope(value: Value, account_id: &str) -> Value {
    strip_prefix(value, &user_prefix(account_id))
}

fn strip_prefix(value: Value, prefix: &str) -> Value {
    match value {
        Value::Array(items) => {
            Value::Array(items.into_iter().map(|v| strip_prefix(v, prefix)).collect())
        }
        Value::Object(mut obj) => {
            for key in ["userId", "user_id"] {
                if let Some(Value::String(user)) = obj.get_mut(key) {
                    if let Some(own) = user.strip_prefix(prefix) {
                        *user = own.to_owned();
                    }
                }
            }
            if let Some(Value::String(detail)) = obj.get_mut("detail") {
                *detail = detail.replace(prefix, "");
            }
            Value::Object(obj)
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::adk::test_support::*;
    use crate::adk::AdkSurface;
    use crate::percent::{decode_segment as percent_decode, encode_segment as path_segment};
    use crate::surface::Surface;

    #[test]
    fn user_ids_round_trip_whatever_the_account_holds() {
        for account in ["acct", "a~b", "a%7Eb", "auth0|123", "x/y", "", "ü"] {
            for user in ["u1", "", "~", "a~b~c", "acct~u1", "x/y z"] {
                let agent = agent_user_id(account, user);
                assert_eq!(
                    client_user_id(account, &agent),
                    Some(user),
                    "{account:?} {user:?}"
                );
            }
        }
        assert_eq!(agent_user_id("acct", "u1"), "acct~u1");
        assert_eq!(agent_user_id("a~b", "u1"), "a%7Eb~u1");
        // Distinct accounts never produce the same agent user id.
        assert_ne!(agent_user_id("a~b", "c"), agent_user_id("a", "b~c"));
        assert_ne!(agent_user_id("a%7Eb", "c"), agent_user_id("a~b", "c"));
        assert_eq!(client_user_id("other", "acct~u1"), None);
    }

    #[test]
    fn segments_escape_all_but_unreserved_bytes_and_decode_like_starlette() {
        assert_eq!(path_segment("a b/~-._ü%"), "a%20b%2F~-._%C3%BC%25");
        assert_eq!(agent_user_id("a b/ü", "u"), "a%20b%2F%C3%BC~u");
        assert_eq!(percent_decode("a%20b%2f%C3%BC"), "a b/ü");
        // Bad escapes stay as they are; invalid UTF-8 is replaced.
        assert_eq!(percent_decode("100%"), "100%");
        assert_eq!(percent_decode("%zz%4%+1"), "%zz%4%+1");
        assert_eq!(percent_decode("%ff"), "\u{fffd}");
    }

    #[test]
    fn forwarded_answers_lose_the_namespace() {
        let req = request("GET", "/apps/adk_agent/users/u1/sessions", b"", "acct");
        let scoped = LIST_SESSIONS.replace(r#""userId":"u1""#, r#""userId":"acct~u1""#);
        let out = AdkSurface.rewrite_forwarded(
            &req,
            "http://tether",
            serde_json::from_str(&scoped).unwrap(),
        );
        assert_eq!(out, serde_json::from_str::<Value>(LIST_SESSIONS).unwrap());

        let one =
            json!({"id": "s", "appName": "a", "user_id": "acct~u~2", "state": {}, "events": []});
        let out = AdkSurface.rewrite_forwarded(&req, "", one);
        assert_eq!(out["user_id"], "u~2");
        // Not the caller's namespace: left alone (never sent by a namespaced path).
        let out = AdkSurface.rewrite_forwarded(&req, "", json!({"userId": "other~u1"}));
        assert_eq!(out["userId"], "other~u1");
        let out = AdkSurface.rewrite_forwarded(&req, "", json!({"detail": "No user acct~u1"}));
        assert_eq!(out, json!({"detail": "No user u1"}));
        assert_eq!(
            AdkSurface.rewrite_forwarded(&req, "", Value::Null),
            Value::Null
        );
    }
}
