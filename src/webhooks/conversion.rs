//! The `/convert` handler, on kube's ConversionReview types: every object converted, or a failure naming the object
//! and the field, in the review's version.

use kube::core::Status;
use kube::core::conversion::{ConversionRequest, ConversionResponse, ConversionReview};
use serde_json::Value;

use crate::api::conversion::convert;

/// Handles one ConversionReview body; returns the response review and whether it succeeded.
pub fn review(body: &[u8]) -> (Value, bool) {
    let parsed: Result<ConversionReview, _> =
        serde_path_to_error::deserialize(&mut serde_json::Deserializer::from_slice(body));
    let request =
        parsed.map_err(|e| format!("malformed ConversionReview: {}: {}", e.path(), e.inner())).and_then(|review| {
            ConversionRequest::from_review(review)
                .map_err(|_| "malformed ConversionReview: request is required".to_owned())
        });
    let response = match request {
        Err(message) => ConversionResponse::invalid(Status::failure(&message, "BadRequest")),
        Ok(request) => {
            let converted: Result<Vec<Value>, String> = request
                .objects
                .iter()
                .map(|o| {
                    convert(o, &request.desired_api_version).map_err(|e| {
                        let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
                        format!("converting {name:?} to {}: {e}", request.desired_api_version)
                    })
                })
                .collect();
            let response = ConversionResponse::for_request(request);
            match converted {
                Ok(objects) => response.success(objects),
                Err(message) => response.failure(Status::failure(&message, "Invalid")),
            }
        }
    };
    let ok = response.result.status == Some(kube::core::response::StatusSummary::Success);
    (serde_json::to_value(response.into_review()).unwrap_or_default(), ok)
}
