//! Installing CustomResourceDefinitions and waiting until they are served.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Api;
use kube::api::PostParams;

use crate::{ApiServer, Error, Result};

const ESTABLISHED_TIMEOUT: Duration = Duration::from_secs(30);
const POLL: Duration = Duration::from_millis(50);

impl ApiServer {
    /// Creates every CRD, then waits (polling, up to 30 s) until each is `Established`,
    /// so a test can create custom resources right after.
    pub async fn install_crds(
        &self,
        crds: impl IntoIterator<Item = CustomResourceDefinition>,
    ) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client().await?);
        let kube_err = |source| Error::Kube {
            server: self.name().to_owned(),
            source,
        };
        let mut names = Vec::new();
        for crd in crds {
            names.push(crd.metadata.name.clone().unwrap_or_default());
            api.create(&PostParams::default(), &crd)
                .await
                .map_err(kube_err)?;
        }
        let deadline = Instant::now() + ESTABLISHED_TIMEOUT;
        for name in names {
            loop {
                let live = api.get(&name).await.map_err(kube_err)?;
                let established = live
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "Established" && c.status == "True");
                if established {
                    break;
                }
                if Instant::now() >= deadline {
                    return Err(Error::CrdNotEstablished {
                        name,
                        seconds: ESTABLISHED_TIMEOUT.as_secs(),
                    });
                }
                tokio::time::sleep(POLL).await;
            }
        }
        Ok(())
    }
}
