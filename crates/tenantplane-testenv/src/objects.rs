//! Making test objects from JSON, the way most tests write them.

use kube::Api;
use kube::api::PostParams;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Why [`create_from_json`] failed.
#[derive(Debug, thiserror::Error)]
pub enum CreateError {
    #[error("the JSON is not this kind's object: {0}")]
    Decode(#[from] serde_json::Error),
    #[error("the API server refused the create: {0}")]
    Api(#[from] kube::Error),
}

/// Creates `object`, written as JSON, through `api`; returns what the server made.
pub async fn create_from_json<K>(api: &Api<K>, object: serde_json::Value) -> Result<K, CreateError>
where
    K: kube::Resource + Clone + DeserializeOwned + Serialize + std::fmt::Debug,
{
    let object: K = serde_json::from_value(object)?;
    Ok(api.create(&PostParams::default(), &object).await?)
}
