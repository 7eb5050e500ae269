//! The fields of an OpenAI client's JSON request read with their types checked, and the
//! errors OpenAI answers a wrong one with (`invalid_json`, `invalid_type`,
//! `missing_required_parameter`, `invalid_value`), for the Chat and Responses surfaces.
//!
//! A parameter is named the way OpenAI's `error.param` names it: a top-level key, or the
//! path of the object it sits in (`messages[0]`) and the key (`messages[0].role`).

use serde_json::{Map, Value};

use crate::turn::InputError;

/// How a surface words the type of a JSON value in "expected …, but got … instead".
#[derive(Clone, Copy)]
pub(crate) struct Params {
    /// Whether numbers are "a decimal" or "an integer" rather than "a number".
    typed_numbers: bool,
}

impl Params {
    /// Chat Completions' wording: any number is "a number".
    pub(crate) const CHAT: Params = Params {
        typed_numbers: false,
    };
    /// Responses' wording: a number is "a decimal" or "an integer".
    pub(crate) const RESPONSES: Params = Params {
        typed_numbers: true,
    };

    fn kind(self, v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) if !self.typed_numbers => "a number",
            Value::Number(n) if n.is_f64() => "a decimal",
            Value::Number(_) => "an integer",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }

    /// The request body, which must be one JSON object.
    pub(crate) fn object(self, body: &[u8]) -> Result<Map<String, Value>, InputError> {
        let value: Value = serde_json::from_slice(body).map_err(|e| {
            InputError::new(
                "invalid_json",
                None,
                format!("The request body is not valid JSON: {e}."),
            )
        })?;
        match value {
            Value::Object(obj) => Ok(obj),
            other => Err(InputError::new(
                "invalid_type",
                None,
                format!(
                    "The request body must be a JSON object, but got {} instead.",
                    self.kind(&other)
                ),
            )),
        }
    }

    pub(crate) fn invalid_type(self, param: &str, expected: &str, got: &Value) -> InputError {
        InputError::new(
            "invalid_type",
            Some(param),
            format!(
                "Invalid type for '{param}': expected {expected}, but got {} instead.",
                self.kind(got)
            ),
        )
    }

    /// A top-level string field.
    pub(crate) fn opt_str(
        self,
        obj: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<String>, InputError> {
        self.typed(obj, key, key, "a string", |v| v.as_str().map(str::to_owned))
    }

    /// A string field of the object at `at`.
    pub(crate) fn opt_str_at(
        self,
        obj: &Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<Option<String>, InputError> {
        let param = format!("{at}.{key}");
        self.typed(obj, key, &param, "a string", |v| {
            v.as_str().map(str::to_owned)
        })
    }

    /// A required string field of the object at `at`.
    pub(crate) fn req_str(
        self,
        obj: &Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<String, InputError> {
        let param = format!("{at}.{key}");
        self.typed(obj, key, &param, "a string", |v| {
            v.as_str().map(str::to_owned)
        })?
        .ok_or_else(|| missing(&param))
    }

    /// A top-level boolean field.
    pub(crate) fn opt_bool(
        self,
        obj: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<bool>, InputError> {
        self.typed(obj, key, key, "a boolean", Value::as_bool)
    }

    /// A boolean field of the object at `at`.
    pub(crate) fn opt_bool_at(
        self,
        obj: &Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<Option<bool>, InputError> {
        self.typed(
            obj,
            key,
            &format!("{at}.{key}"),
            "a boolean",
            Value::as_bool,
        )
    }

    /// An object field of the object at `at`, kept as JSON (a tool's `parameters`).
    pub(crate) fn opt_object_at(
        self,
        obj: &Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<Option<Value>, InputError> {
        let param = format!("{at}.{key}");
        self.typed(obj, key, &param, "an object", |v| {
            v.is_object().then(|| v.clone())
        })
    }

    /// A required object field of the object at `at`.
    pub(crate) fn req_object<'a>(
        self,
        obj: &'a Map<String, Value>,
        key: &str,
        at: &str,
    ) -> Result<&'a Map<String, Value>, InputError> {
        let param = format!("{at}.{key}");
        match field(obj, key) {
            None => Err(missing(&param)),
            Some(Value::Object(o)) => Ok(o),
            Some(v) => Err(self.invalid_type(&param, "an object", v)),
        }
    }

    /// A top-level number field.
    pub(crate) fn opt_number(
        self,
        obj: &Map<String, Value>,
        key: &str,
    ) -> Result<Option<f64>, InputError> {
        let expected = if self.typed_numbers {
            "a decimal"
        } else {
            "a number"
        };
        self.typed(obj, key, key, expected, Value::as_f64)
    }

    /// A field read by `read`, which answers `None` when the value is of the wrong type.
    fn typed<T>(
        self,
        obj: &Map<String, Value>,
        key: &str,
        param: &str,
        expected: &str,
        read: impl Fn(&Value) -> Option<T>,
    ) -> Result<Option<T>, InputError> {
        match field(obj, key) {
            None => Ok(None),
            Some(v) => read(v)
                .map(Some)
                .ok_or_else(|| self.invalid_type(param, expected, v)),
        }
    }
}

/// A present, non-null field: OpenAI treats an explicit `null` as "not given".
pub(crate) fn field<'a>(obj: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    obj.get(key).filter(|v| !v.is_null())
}

pub(crate) fn missing(param: &str) -> InputError {
    InputError::new(
        "missing_required_parameter",
        Some(param),
        format!("Missing required parameter: '{param}'."),
    )
}

pub(crate) fn invalid_value(param: &str, message: impl Into<String>) -> InputError {
    InputError::new("invalid_value", Some(param), message)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn each_surface_words_numbers_its_own_way() {
        let got = |p: Params, v: Value| p.invalid_type("x", "a string", &v).message;
        assert_eq!(
            got(Params::CHAT, json!(1.5)),
            "Invalid type for 'x': expected a string, but got a number instead."
        );
        assert_eq!(
            got(Params::RESPONSES, json!(1.5)),
            "Invalid type for 'x': expected a string, but got a decimal instead."
        );
        assert_eq!(
            got(Params::RESPONSES, json!(2)),
            "Invalid type for 'x': expected a string, but got an integer instead."
        );
        let body = |p: Params| p.object(b"[1]").unwrap_err().message;
        assert_eq!(
            body(Params::CHAT),
            "The request body must be a JSON object, but got an array instead."
        );
    }

    #[test]
    fn nested_fields_are_named_by_their_path() {
        let obj = json!({ "a": 1, "b": null }).as_object().unwrap().clone();
        let e = Params::CHAT.req_str(&obj, "a", "tools[0]").unwrap_err();
        assert_eq!(
            (e.code, e.param.as_deref()),
            ("invalid_type", Some("tools[0].a"))
        );
        let e = Params::CHAT.req_str(&obj, "b", "tools[0]").unwrap_err();
        assert_eq!(
            (e.code, e.param.as_deref()),
            ("missing_required_parameter", Some("tools[0].b"))
        );
        assert_eq!(Params::CHAT.opt_bool(&obj, "b"), Ok(None));
    }
}
