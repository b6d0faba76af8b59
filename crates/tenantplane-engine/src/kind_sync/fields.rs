//! The JSON fields of tenant and host objects, and the few calls every path makes
//! with them: GET as JSON, PUT status, a Warning Event on a tenant object. A leaf,
//! so the Pod, storage, dependency and Service modules all use it without using
//! each other.

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Api;
use kube::api::{ApiResource, DynamicObject, GroupVersionKind};
use kube::runtime::events::{Event, EventType, Recorder};
use serde_json::Value;

use super::{SyncError, post_params, typed_value};

pub(super) fn core_resource(kind: &str) -> ApiResource {
    ApiResource::from_gvk(&GroupVersionKind::gvk("", "v1", kind))
}

pub(super) fn api_error(verb: &'static str, name: &str) -> impl FnOnce(kube::Error) -> SyncError {
    let name = name.to_owned();
    move |source| SyncError::Api { verb, name, source }
}

/// `GET` one object as JSON with its kind; `None` when it does not exist.
pub(super) async fn get_value(
    api: &Api<DynamicObject>,
    resource: &ApiResource,
    name: &str,
) -> Result<Option<Value>, SyncError> {
    api.get_opt(name)
        .await
        .map_err(api_error("get", name))?
        .map(|o| typed_value(&o, resource))
        .transpose()
}

/// `PUT <resource>/status`: `object` (as observed, with its resourceVersion)
/// carrying `status`.
pub(super) async fn put_status(
    api: &Api<DynamicObject>,
    object: &Value,
    status: Value,
) -> Result<(), SyncError> {
    let name = str_at(object, "/metadata/name").unwrap_or_default();
    let mut object = object.clone();
    if let Some(map) = object.as_object_mut() {
        map.insert("status".into(), status);
    }
    let body: DynamicObject =
        serde_json::from_value(object).map_err(|e| SyncError::Decode(e.to_string()))?;
    api.replace_status(&name, &post_params(), &body)
        .await
        .map_err(api_error("update the status of", &name))?;
    Ok(())
}

pub(super) fn to_value(object: &DynamicObject) -> Result<Value, SyncError> {
    serde_json::to_value(object).map_err(|e| SyncError::Decode(e.to_string()))
}

/// A Warning Event on a tenant object, where its owner looks.
pub(super) async fn warn_tenant_object(
    events: &Recorder,
    api_version: &str,
    kind: &str,
    object: &Value,
    reason: &str,
    note: String,
) {
    let reference = ObjectReference {
        api_version: Some(api_version.into()),
        kind: Some(kind.into()),
        name: str_at(object, "/metadata/name"),
        namespace: str_at(object, "/metadata/namespace"),
        uid: str_at(object, "/metadata/uid"),
        ..ObjectReference::default()
    };
    let event = Event {
        type_: EventType::Warning,
        reason: reason.into(),
        note: Some(note),
        action: "Sync".into(),
        secondary: None,
    };
    if let Err(err) = events.publish(&event, &reference).await {
        tracing::warn!(%err, kind, "could not publish an event on a tenant object");
    }
}

pub(super) fn str_at(value: &Value, pointer: &str) -> Option<String> {
    value
        .pointer(pointer)
        .and_then(Value::as_str)
        .map(str::to_owned)
}

pub(super) fn string_list(value: Option<&Value>) -> Vec<String> {
    value
        .and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(Value::as_str)
                .map(str::to_owned)
                .collect()
        })
        .unwrap_or_default()
}
