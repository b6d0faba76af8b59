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

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;
    use crate::mock_api::{MockApi, status};

    #[tokio::test]
    async fn gone_or_replaced_is_nothing_to_delete_and_other_failures_are_errors() {
        let mock = MockApi::new();
        mock.reply(200, status(200, "Success", ""))
            .reply(404, status(404, "NotFound", "not found"))
            .reply(
                409,
                status(409, "Conflict", "Precondition failed: UID in precondition"),
            )
            .reply(500, status(500, "InternalError", "etcd timeout"));
        let api: Api<ConfigMap> = Api::namespaced(mock.client(), "team-a");
        let params = exactly(Some("uid-1".into()));
        assert!(delete_exact(&api, "settings", &params).await.unwrap());
        assert!(!delete_exact(&api, "settings", &params).await.unwrap());
        assert!(!delete_exact(&api, "settings", &params).await.unwrap());
        assert!(delete_exact(&api, "settings", &params).await.is_err());
        let sent = mock.sent();
        assert_eq!(sent.len(), 4);
        for request in &sent {
            assert_eq!(request.method, http::Method::DELETE);
            assert_eq!(
                request.path,
                "/api/v1/namespaces/team-a/configmaps/settings"
            );
            let body = request.body.clone().unwrap();
            assert_eq!(body["preconditions"]["uid"], "uid-1");
        }
    }
}
