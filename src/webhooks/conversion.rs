//! The `/convert` handler: a ConversionReview in, every object converted (or a failure naming the field) out.

use serde::Deserialize;
use serde_json::{Value, json};

use crate::api::conversion::convert;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct Request {
    #[serde(default)]
    uid: String,
    #[serde(rename = "desiredAPIVersion", default)]
    desired_api_version: String,
    #[serde(default)]
    objects: Vec<Value>,
}

/// Handles one ConversionReview body; returns the response review and whether it succeeded.
pub fn review(body: &[u8]) -> (Value, bool) {
    let parsed: Result<Value, _> = serde_json::from_slice(body);
    let api_version = parsed
        .as_ref()
        .ok()
        .and_then(|v| v.get("apiVersion"))
        .and_then(Value::as_str)
        .unwrap_or("apiextensions.k8s.io/v1")
        .to_owned();
    let request = parsed
        .map_err(|e| format!("malformed ConversionReview: {e}"))
        .and_then(|v| {
            v.get("request").cloned().ok_or_else(|| "malformed ConversionReview: request is required".to_owned())
        })
        .and_then(|r| {
            serde_path_to_error::deserialize::<_, Request>(r)
                .map_err(|e| format!("malformed ConversionReview: request.{}: {}", e.path(), e.inner()))
        });
    let (uid, result) = match request {
        Err(message) => (String::new(), Err(message)),
        Ok(req) => {
            let converted: Result<Vec<Value>, String> = req
                .objects
                .iter()
                .map(|o| {
                    convert(o, &req.desired_api_version).map_err(|e| {
                        let name = o.pointer("/metadata/name").and_then(Value::as_str).unwrap_or("");
                        format!("converting {name:?} to {}: {e}", req.desired_api_version)
                    })
                })
                .collect();
            (req.uid, converted)
        }
    };
    let ok = result.is_ok();
    let response = match result {
        Ok(objects) => json!({"uid": uid, "convertedObjects": objects, "result": {"status": "Success"}}),
        Err(message) => {
            json!({"uid": uid, "convertedObjects": [], "result": {"status": "Failure", "message": message}})
        }
    };
    (json!({"apiVersion": api_version, "kind": "ConversionReview", "response": response}), ok)
}
