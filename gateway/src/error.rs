//! `ApiError`: a refusal or failure as HTTP sees it (status, error type and code, extra
//! headers), before it is written in the format of the API that was called (see
//! `client::respond` for the writing, `serve::route` for which format).

use policies::Limited;

/// An error to send in the surface's own format.
pub struct ApiError {
    pub status: u16,
    pub kind: &'static str,
    pub code: &'static str,
    pub param: Option<String>,
    pub message: String,
    /// Extra response headers (Retry-After and friends on a 429).
    pub headers: Vec<(&'static str, String)>,
}

impl ApiError {
    pub fn new(
        status: u16,
        kind: &'static str,
        code: &'static str,
        message: impl Into<String>,
    ) -> Self {
        ApiError {
            status,
            kind,
            code,
            param: None,
            message: message.into(),
            headers: Vec::new(),
        }
    }

    /// A 429 from a rate limit or the concurrent-run cap.
    pub fn limited(l: &Limited) -> Self {
        let mut e = ApiError::new(
            Limited::STATUS,
            "rate_limit_error",
            "rate_limit_exceeded",
            l.to_string(),
        );
        e.headers = l.headers().to_vec();
        e
    }

    /// The store failed: logged here with `context`, told to the client without detail.
    pub fn store_unavailable(error: &dyn std::fmt::Display, context: &str) -> Self {
        tracing::error!(%error, "{context}");
        ApiError::new(
            503,
            "server_error",
            "session_store_unavailable",
            "the session store is unavailable",
        )
    }

    /// Work refused because the store cannot write now (an outage, or less free space
    /// than `store_min_free_bytes`): at once, with when to try again, rather than held
    /// until it can.
    pub fn store_unwritable(why: session_log::Unwritable) -> Self {
        let mut e = ApiError::new(
            503,
            "server_error",
            "session_store_unavailable",
            format!("{why}; try again later"),
        );
        e.headers.push((
            "retry-after",
            session_log::health::RETRY_AFTER_SECS.to_string(),
        ));
        e
    }

    /// A client stream or answer that cannot go on because the log cannot be read; the
    /// client resumes from what it has.
    pub fn log_unavailable() -> Self {
        ApiError::new(
            503,
            "server_error",
            "session_store_unavailable",
            "the session log is unavailable; resume later",
        )
    }

    pub fn with_param(mut self, param: &str) -> Self {
        self.param = Some(param.to_owned());
        self
    }

    /// The extra headers as `respond` takes them.
    pub fn header_pairs(&self) -> Vec<(&str, &str)> {
        self.headers.iter().map(|(k, v)| (*k, v.as_str())).collect()
    }
}
