//! The controllers' error: what failed, a bounded kind for metrics, and whether trying again can help.

use std::time::Duration;

use crate::apiserver::ApiError;
use crate::runtime::retry::{RECHECK, Retry};

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

    /// A bounded label for metrics: one of `crate::metrics::ERROR_KINDS`, which exports each from the start, at 0.
    /// (The metrics know no error of ours: the error's policy names the runtime's `Retry`, and the runtime reports
    /// to the metrics.)
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

    /// The error policy: what a run that failed with this error asks of its queue; `api_down` is whether the API
    /// server still does not answer.
    pub fn retry(&self, api_down: bool) -> Retry {
        if self.is_unreachable() {
            // It answered while this run was failing: do not wait for the next outage.
            if api_down { Retry::WhenAnswering } else { Retry::After(Duration::from_millis(200)) }
        } else if !self.is_transient() {
            Retry::After(RECHECK)
        } else {
            Retry::Backoff
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
    fn the_policy_parks_while_unreachable_rechecks_refusals_and_backs_off_otherwise() {
        let unreachable = Error::api("creating")(ApiError::Unreachable("reset".into()));
        assert_eq!(unreachable.retry(true), Retry::WhenAnswering);
        assert_eq!(unreachable.retry(false), Retry::After(Duration::from_millis(200)));
        let refused = Error::api("creating")(ApiError::from_status(422, "Invalid", "denied"));
        assert_eq!(refused.retry(false), Retry::After(RECHECK));
        assert_eq!(Error::Rejected("denied".into()).retry(false), Retry::After(RECHECK));
        let conflict = Error::api("writing")(ApiError::from_status(409, "Conflict", "changed"));
        assert_eq!(conflict.retry(false), Retry::Backoff);
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
        let mut listed = crate::metrics::ERROR_KINDS.to_vec();
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
