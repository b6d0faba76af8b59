//! Refusals and patches as AdmissionResponses, shared by the tenancy handlers.

use kube::core::Status;
use kube::core::admission::AdmissionResponse;
use serde_json::Value;

/// A refusal: the message, the HTTP code and reason the API server returns.
#[derive(Debug)]
pub(crate) struct Refusal {
    pub message: String,
    pub code: u16,
    pub reason: &'static str,
}

impl Refusal {
    pub fn forbidden(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: 403,
            reason: "Forbidden",
        }
    }

    pub fn internal(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
            code: 500,
            reason: "InternalError",
        }
    }
}

/// `response` with the handler's decision: `Ok(None)` allows unchanged,
/// `Ok(Some(ops))` allows with that JSONPatch, `Err` denies.
pub(crate) fn decided(
    response: AdmissionResponse,
    decision: Result<Option<Value>, Refusal>,
) -> AdmissionResponse {
    match decision {
        Ok(None) => response,
        Ok(Some(patch)) => match serde_json::from_value::<json_patch::Patch>(patch) {
            Ok(patch) => match response.clone().with_patch(patch) {
                Ok(patched) => patched,
                Err(err) => deny(
                    response,
                    Refusal::internal(format!("cannot encode the patch: {err}")),
                ),
            },
            Err(err) => deny(
                response,
                Refusal::internal(format!("cannot build the patch: {err}")),
            ),
        },
        Err(refusal) => deny(response, refusal),
    }
}

pub(crate) fn deny(response: AdmissionResponse, refusal: Refusal) -> AdmissionResponse {
    let mut denied = response.deny(&refusal.message);
    denied.result = Status::failure(&refusal.message, refusal.reason).with_code(refusal.code);
    denied
}

/// Escapes a JSON-pointer segment (RFC 6901).
pub(crate) fn escape(segment: &str) -> String {
    segment.replace('~', "~0").replace('/', "~1")
}
