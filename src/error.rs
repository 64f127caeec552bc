//! The controllers' error: what failed, a bounded kind for metrics, and whether trying again can help.

use crate::apiserver::ApiError;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Api {
        what: &'static str,
        #[source]
        source: ApiError,
    },
    /// The API server refused a write for a reason that will not change by itself (the claim's status says why).
    #[error("{0}")]
    Rejected(String),
    #[error("internal error: {0}")]
    Internal(String),
}

impl Error {
    /// What failed, for `map_err`.
    pub fn api(what: &'static str) -> impl FnOnce(ApiError) -> Error {
        move |source| Error::Api { what, source }
    }

    pub fn internal(e: impl std::fmt::Display) -> Error {
        Error::Internal(e.to_string())
    }

    /// Every value of [`Error::kind`] (the metrics export each from the start, at 0).
    pub const KINDS: [&'static str; 8] =
        ["conflict", "not_found", "throttled", "api", "transport", "rejected", "internal", "fenced"];

    /// A bounded label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Api { source, .. } => match source {
                ApiError::Conflict(_) | ApiError::AlreadyExists(_) => "conflict",
                ApiError::NotFound => "not_found",
                ApiError::Failed { code: 429, .. } => "throttled",
                ApiError::Refused { .. } | ApiError::Failed { .. } => "api",
                ApiError::Unreachable(_) => "transport",
                ApiError::Fenced(_) => "fenced",
            },
            Error::Rejected(_) => "rejected",
            Error::Internal(_) => "internal",
        }
    }

    /// The request never got an answer from the API server (connect, TLS, timeout, a dropped connection).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Error::Api { source: ApiError::Unreachable(_), .. })
    }

    /// Whether the same request may succeed soon: transport failures, conflicts, throttling, server errors and
    /// objects that vanished in a race are; a refusal the API server will repeat (400, 403, 405, 413, 415, 422) is
    /// not, and is not retried with a short backoff (the claim is looked at again when something changes).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Api { source, .. } => !matches!(source, ApiError::Refused { .. }),
            Error::Rejected(_) | Error::Internal(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> Error {
        Error::api("writing")(ApiError::from_status(code, "Refused", "refused"))
    }

    #[test]
    fn every_kind_is_listed() {
        let kinds = [409, 404, 429, 500].map(|code| api(code).kind());
        let others = [
            Error::api("reading")(ApiError::Unreachable("reset".into())).kind(),
            Error::Rejected(String::new()).kind(),
            Error::internal("x").kind(),
            Error::api("writing")(ApiError::Fenced(crate::leader::Fenced)).kind(),
        ];
        let mut seen: Vec<&str> = kinds.iter().chain(&others).copied().collect();
        seen.sort_unstable();
        let mut listed = Error::KINDS.to_vec();
        listed.sort_unstable();
        assert_eq!(seen, listed);
    }

    #[test]
    fn refusals_that_will_repeat_are_not_transient() {
        for code in [400, 403, 422] {
            assert!(!api(code).is_transient(), "{code}");
        }
        for code in [404, 409, 429, 500, 503] {
            assert!(api(code).is_transient(), "{code}");
        }
        assert!(!Error::Rejected("denied".into()).is_transient());
        assert_eq!(api(409).kind(), "conflict");
        assert_eq!(api(422).kind(), "api");
    }
}
