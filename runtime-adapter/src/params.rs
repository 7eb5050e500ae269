//! The fields of an OpenAI client's JSON request read with their types checked, and the
//! errors OpenAI answers a wrong one with (`invalid_json`, `invalid_type`,
//! `missing_required_parameter`, `invalid_value`), for the Chat and Responses surfaces.
//!
//! A parameter is named the way OpenAI's `error.param` names it: a top-level key, or the
//! path of the object it sits in (`messages[0]`) and the key (`messages[0].role`).

use serde_json::{Map, Value};

use crate::turn::InputError;

type Obj = Map<String, Value>;

/// A field that may be absent, or the error for one of the wrong type.
type Found<T> = Result<Option<T>, InputError>;

/// Whose wording the errors take: the two APIs say the same things slightly differently.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Params {
    /// Chat Completions: any number is "a number".
    Chat,
    /// Responses: a number is "a decimal" or "an integer".
    Responses,
}

impl Params {
    fn kind(self, v: &Value) -> &'static str {
        match v {
            Value::Null => "null",
            Value::Bool(_) => "a boolean",
            Value::Number(_) if self == Params::Chat => "a number",
            Value::Number(n) if n.is_f64() => "a decimal",
            Value::Number(_) => "an integer",
            Value::String(_) => "a string",
            Value::Array(_) => "an array",
            Value::Object(_) => "an object",
        }
    }

    /// The request body, which must be one JSON object.
    pub(crate) fn object(self, body: &[u8]) -> Result<Obj, InputError> {
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
    pub(crate) fn opt_str(self, obj: &Obj, key: &str) -> Found<String> {
        self.typed(obj, key, key, "a string", string)
    }

    /// A string field of the object at `at`.
    pub(crate) fn opt_str_at(self, obj: &Obj, key: &str, at: &str) -> Found<String> {
        self.typed(obj, key, &path(at, key), "a string", string)
    }

    /// A required string field of the object at `at`.
    pub(crate) fn req_str(self, obj: &Obj, key: &str, at: &str) -> Result<String, InputError> {
        self.opt_str_at(obj, key, at)?
            .ok_or_else(|| missing(&path(at, key)))
    }

    /// A top-level boolean field.
    pub(crate) fn opt_bool(self, obj: &Obj, key: &str) -> Found<bool> {
        self.typed(obj, key, key, "a boolean", Value::as_bool)
    }

    /// A boolean field of the object at `at`.
    pub(crate) fn opt_bool_at(self, obj: &Obj, key: &str, at: &str) -> Found<bool> {
        self.typed(obj, key, &path(at, key), "a boolean", Value::as_bool)
    }

    /// A top-level number field, which must lie between 0 and `max`.
    pub(crate) fn opt_number(self, obj: &Obj, key: &str, max: f64) -> Found<f64> {
        let expected = match self {
            Params::Chat => "a number",
            Params::Responses => "a decimal",
        };
        let Some(n) = self.typed(obj, key, key, expected, Value::as_f64)? else {
            return Ok(None);
        };
        if (0.0..=max).contains(&n) {
            return Ok(Some(n));
        }
        Err(invalid_value(
            key,
            match self {
                Params::Chat => format!(
                    "Invalid '{key}': {n} is out of range; expected a number between 0 and {max}."
                ),
                Params::Responses => format!(
                    "Invalid value for '{key}': expected a number between 0 and {max}, but got {n} instead."
                ),
            },
        ))
    }

    /// An object field of the object at `at`, kept as JSON (a tool's `parameters`).
    pub(crate) fn opt_object_at(self, obj: &Obj, key: &str, at: &str) -> Found<Value> {
        let object = |v: &Value| v.is_object().then(|| v.clone());
        self.typed(obj, key, &path(at, key), "an object", object)
    }

    /// A required object field of the object at `at`.
    pub(crate) fn req_object<'a>(
        self,
        obj: &'a Obj,
        key: &str,
        at: &str,
    ) -> Result<&'a Obj, InputError> {
        let param = path(at, key);
        match field(obj, key) {
            None => Err(missing(&param)),
            Some(Value::Object(o)) => Ok(o),
            Some(v) => Err(self.invalid_type(&param, "an object", v)),
        }
    }

    /// A field read by `read`, which answers `None` when the value is of the wrong type.
    fn typed<T>(
        self,
        obj: &Obj,
        key: &str,
        param: &str,
        expected: &str,
        read: impl Fn(&Value) -> Option<T>,
    ) -> Found<T> {
        match field(obj, key) {
            None => Ok(None),
            Some(v) => read(v)
                .map(Some)
                .ok_or_else(|| self.invalid_type(param, expected, v)),
        }
    }
}

/// The parameter `key` of the object at `at` (`messages[0].role`).
fn path(at: &str, key: &str) -> String {
    format!("{at}.{key}")
}

fn string(v: &Value) -> Option<String> {
    v.as_str().map(str::to_owned)
}

/// A present, non-null field: OpenAI treats an explicit `null` as "not given".
pub(crate) fn field<'a>(obj: &'a Obj, key: &str) -> Option<&'a Value> {
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
            got(Params::Chat, json!(1.5)),
            "Invalid type for 'x': expected a string, but got a number instead."
        );
        assert_eq!(
            got(Params::Responses, json!(1.5)),
            "Invalid type for 'x': expected a string, but got a decimal instead."
        );
        assert_eq!(
            got(Params::Responses, json!(2)),
            "Invalid type for 'x': expected a string, but got an integer instead."
        );
        let body = |p: Params| p.object(b"[1]").unwrap_err().message;
        assert_eq!(
            body(Params::Chat),
            "The request body must be a JSON object, but got an array instead."
        );
    }

    #[test]
    fn nested_fields_are_named_by_their_path() {
        let obj = json!({ "a": 1, "b": null }).as_object().unwrap().clone();
        let e = Params::Chat.req_str(&obj, "a", "tools[0]").unwrap_err();
        assert_eq!(
            (e.code, e.param.as_deref()),
            ("invalid_type", Some("tools[0].a"))
        );
        let e = Params::Chat.req_str(&obj, "b", "tools[0]").unwrap_err();
        assert_eq!(
            (e.code, e.param.as_deref()),
            ("missing_required_parameter", Some("tools[0].b"))
        );
        assert_eq!(Params::Chat.opt_bool(&obj, "b"), Ok(None));
    }

    #[test]
    fn numbers_out_of_range_are_worded_per_surface() {
        let obj = json!({ "temperature": 2.5, "top_p": 1 })
            .as_object()
            .unwrap()
            .clone();
        assert_eq!(
            Params::Chat
                .opt_number(&obj, "temperature", 2.0)
                .unwrap_err()
                .message,
            "Invalid 'temperature': 2.5 is out of range; expected a number between 0 and 2."
        );
        assert_eq!(
            Params::Responses.opt_number(&obj, "temperature", 2.0).unwrap_err().message,
            "Invalid value for 'temperature': expected a number between 0 and 2, but got 2.5 instead."
        );
        assert_eq!(Params::Chat.opt_number(&obj, "top_p", 1.0), Ok(Some(1.0)));
    }
}
