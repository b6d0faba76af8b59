//! Connecting to the host cluster: `--kubeconfig`, else `KUBECONFIG`, else in-cluster.

use std::path::Path;

use anyhow::Context;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

pub async fn connect(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    let config = match kubeconfig {
        Some(path) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))?
        }
        // KUBECONFIG or ~/.kube/config, then the in-cluster service account.
        None => kube::Config::infer()
            .await
            .context("finding a kubeconfig (set --kubeconfig or KUBECONFIG)")?,
    };
    Client::try_from(config).context("building the Kubernetes client")
}
