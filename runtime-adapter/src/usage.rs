//! Token usage: one reading of an agent's usage report, whichever API shape it came in
//! (Chat's `prompt_tokens` or Responses' `input_tokens`), rendered in either shape.

use serde_json::{json, Value};

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub output: u64,
    pub total: u64,
    pub cached: Option<u64>,
    pub cache_write: Option<u64>,
    pub reasoning: Option<u64>,
}

impl Usage {
    /// Reads usage in either shape; `None` when it names neither input nor output tokens.
    pub fn read(u: &Value) -> Option<Usage> {
        let n = |paths: &[&str]| {
            paths.iter().find_map(|path| {
                let mut v = u;
                for part in path.split('.') {
                    v = v.get(part)?;
                }
                v.as_u64()
            })
        };
        let input = n(&["input_tokens", "prompt_tokens"]);
        let output = n(&["output_tokens", "completion_tokens"]);
        if input.is_none() && output.is_none() {
            return None;
        }
        let (input, output) = (input.unwrap_or(0), output.unwrap_or(0));
        Some(Usage {
            input,
            output,
            total: n(&["total_tokens"]).unwrap_or(input + output),
            cached: n(&[
                "input_tokens_details.cached_tokens",
                "prompt_tokens_details.cached_tokens",
            ]),
            cache_write: n(&["input_tokens_details.cache_write_tokens"]),
            reasoning: n(&[
                "output_tokens_details.reasoning_tokens",
                "completion_tokens_details.reasoning_tokens",
            ]),
        })
    }

    /// Chat Completions shape; details only when the agent reported them.
    pub fn to_chat(self) -> Value {
        let mut out = json!({ "prompt_tokens": self.input, "completion_tokens": self.output, "total_tokens": self.total });
        if let Some(c) = self.cached {
            out["prompt_tokens_details"] = json!({ "cached_tokens": c });
        }
        if let Some(r) = self.reasoning {
            out["completion_tokens_details"] = json!({ "reasoning_tokens": r });
        }
        out
    }

    /// Responses shape; the SDK's type requires both detail objects.
    pub fn to_responses(self) -> Value {
        json!({
            "input_tokens": self.input,
            "input_tokens_details": {
                "cached_tokens": self.cached.unwrap_or(0),
                "cache_write_tokens": self.cache_write.unwrap_or(0),
            },
            "output_tokens": self.output,
            "output_tokens_details": { "reasoning_tokens": self.reasoning.unwrap_or(0) },
            "total_tokens": self.total,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn either_shape_reads_the_same() {
        let chat = json!({"prompt_tokens": 3, "completion_tokens": 4, "prompt_tokens_details": {"cached_tokens": 1}});
        let responses = json!({"input_tokens": 3, "output_tokens": 4, "input_tokens_details": {"cached_tokens": 1}});
        assert_eq!(Usage::read(&chat), Usage::read(&responses));
        let u = Usage::read(&chat).unwrap();
        assert_eq!(u.total, 7);
        assert_eq!(
            u.to_chat(),
            json!({"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7, "prompt_tokens_details": {"cached_tokens": 1}})
        );
        assert_eq!(
            u.to_responses()["output_tokens_details"]["reasoning_tokens"],
            0
        );
        assert_eq!(Usage::read(&json!({"foo": 1})), None);
    }
}
