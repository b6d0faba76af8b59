//! Deleting exactly the object that was read: a UID precondition, so an object
//! deleted and recreated under the same name since (perhaps by someone else) is
//! never touched.

use kube::Api;
use kube::api::{DeleteParams, Preconditions};
use serde::de::DeserializeOwned;

/// Delete options that match only the object with this UID.
pub(crate) fn exactly(uid: Option<String>) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid,
            resource_version: None,
        }),
        ..DeleteParams::default()
    }
}

/// Deletes `name` with `params` (built on [`exactly`]). `Ok(false)` when there was
/// nothing to delete: gone already (404) or replaced by another object (409).
pub(crate) async fn delete_exact<K>(
    api: &Api<K>,
    name: &str,
    params: &DeleteParams,
) -> Result<bool, kube::Error>
where
    K: Clone + DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, params).await {
        Ok(_) => Ok(true),
        Err(kube::Error::Api(status)) if status.code == 404 || status.code == 409 => Ok(false),
        Err(err) => Err(err),
    }
}
