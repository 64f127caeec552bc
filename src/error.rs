//! The controllers' error: what failed, a bounded kind for metrics, and whether trying again can help.

use crate::leader::Fenced;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{what}: {source}")]
    Kube {
        what: &'static str,
        #[source]
        source: Box<kube::Error>,
    },
    /// The API server refused a write for a reason that will not change by itself (the claim's status says why).
    #[error("{0}")]
    Rejected(String),
    #[error("internal error: {0}")]
    Internal(String),
    #[error(transparent)]
    Fenced(#[from] Fenced),
}

impl Error {
    pub fn kube(what: &'static str) -> impl FnOnce(kube::Error) -> Error {
        move |source| Error::Kube { what, source: Box::new(source) }
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
            Error::Kube { source, .. } => match source.as_ref() {
                kube::Error::Api(s) if s.code == 409 => "conflict",
                kube::Error::Api(s) if s.code == 404 => "not_found",
                kube::Error::Api(s) if s.code == 429 => "throttled",
                kube::Error::Api(_) => "api",
                _ => "transport",
            },
            Error::Rejected(_) => "rejected",
            Error::Internal(_) => "internal",
            Error::Fenced(_) => "fenced",
        }
    }

    /// The request never got an answer from the API server (connect, TLS, timeout, a dropped connection).
    pub fn is_unreachable(&self) -> bool {
        matches!(self, Error::Kube { source, .. } if is_transport(source))
    }

    /// Whether the same request may succeed soon: transport failures, conflicts, throttling, server errors and
    /// objects that vanished in a race are; a refusal the API server will repeat (400, 403, 405, 413, 415, 422) is
    /// not, and is not retried with a short backoff (the claim is looked at again when something changes).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Kube { source, .. } => {
                !matches!(source.as_ref(), kube::Error::Api(s) if matches!(s.code, 400 | 403 | 405 | 413 | 415 | 422))
            }
            Error::Rejected(_) | Error::Internal(_) => false,
            Error::Fenced(_) => true,
        }
    }
}

pub fn is_transport(e: &kube::Error) -> bool {
    matches!(e, kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::HttpError(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16) -> Error {
        let status = kube::core::Status::failure("refused", "Refused").with_code(code);
        Error::kube("writing")(kube::Error::Api(status.boxed()))
    }

    #[test]
    fn every_kind_is_listed() {
        let kinds = [409, 404, 429, 500].map(|code| api(code).kind());
        let others = [
            Error::kube("reading")(kube::Error::LinesCodecMaxLineLengthExceeded).kind(),
            Error::Rejected(String::new()).kind(),
            Error::internal("x").kind(),
            Error::Fenced(Fenced).kind(),
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
