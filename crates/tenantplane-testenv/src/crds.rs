//! Installing CustomResourceDefinitions and waiting until they are served, and an
//! example operator CRD for tests of custom-resource sync.

use std::time::{Duration, Instant};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion, CustomResourceSubresourceStatus,
    CustomResourceSubresources, CustomResourceValidation, JSONSchemaProps,
};
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
        self.wait_established(names).await
    }

    /// Waits (polling, up to 30 s) until each CRD named is `Established`.
    pub async fn wait_established(&self, names: Vec<String>) -> Result<()> {
        let api: Api<CustomResourceDefinition> = Api::all(self.client().await?);
        let kube_err = |source| Error::Kube {
            server: self.name().to_owned(),
            source,
        };
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

/// `gadgets.example.com`: a namespaced custom resource with a status subresource
/// and free-form spec and status, as an operator's CRD (two-way sync tests).
pub fn gadget_crd() -> CustomResourceDefinition {
    let free_form = JSONSchemaProps {
        type_: Some("object".into()),
        x_kubernetes_preserve_unknown_fields: Some(true),
        ..Default::default()
    };
    let schema = JSONSchemaProps {
        type_: Some("object".into()),
        properties: Some(
            [
                ("spec".to_owned(), free_form.clone()),
                ("status".to_owned(), free_form),
            ]
            .into(),
        ),
        ..Default::default()
    };
    let mut crd = CustomResourceDefinition::default();
    crd.metadata.name = Some("gadgets.example.com".into());
    crd.spec.group = "example.com".into();
    crd.spec.scope = "Namespaced".into();
    crd.spec.names.plural = "gadgets".into();
    crd.spec.names.singular = Some("gadget".into());
    crd.spec.names.kind = "Gadget".into();
    crd.spec.versions = vec![CustomResourceDefinitionVersion {
        name: "v1".into(),
        served: true,
        storage: true,
        subresources: Some(CustomResourceSubresources {
            status: Some(CustomResourceSubresourceStatus(serde_json::json!({}))),
            ..Default::default()
        }),
        schema: Some(CustomResourceValidation {
            open_api_v3_schema: Some(schema),
        }),
        ..Default::default()
    }];
    crd
}
