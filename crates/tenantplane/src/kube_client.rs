//! Connecting to the host cluster: `--kubeconfig`, else `KUBECONFIG`, else in-cluster;
//! `--context` picks a context like kubectl's flag does.

use std::path::{Path, PathBuf};

use anyhow::Context;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};

/// kubectl's connection flags, shared by every command that talks to the host.
#[derive(Debug, Clone, Default, clap::Args)]
pub struct ClusterArgs {
    /// Path to the kubeconfig file (default: KUBECONFIG, ~/.kube/config, in-cluster).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// The kubeconfig context to use (default: its current-context).
    #[arg(long)]
    pub context: Option<String>,
}

impl ClusterArgs {
    pub async fn client(&self) -> anyhow::Result<Client> {
        connect_with(self.kubeconfig.as_deref(), self.context.as_deref()).await
    }
}

pub async fn connect(kubeconfig: Option<&Path>) -> anyhow::Result<Client> {
    connect_with(kubeconfig, None).await
}

pub async fn connect_with(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<Client> {
    Client::try_from(config_with(kubeconfig, context).await?)
        .context("building the Kubernetes client")
}

/// The client configuration [`connect_with`] uses, for a client built with layers.
pub async fn config_with(
    kubeconfig: Option<&Path>,
    context: Option<&str>,
) -> anyhow::Result<kube::Config> {
    let options = KubeConfigOptions {
        context: context.map(str::to_owned),
        ..KubeConfigOptions::default()
    };
    let config = match (kubeconfig, context) {
        (Some(path), _) => {
            let kubeconfig = Kubeconfig::read_from(path)
                .with_context(|| format!("reading kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options)
                .await
                .with_context(|| format!("using kubeconfig {}", path.display()))?
        }
        // A context only makes sense in a kubeconfig: KUBECONFIG or ~/.kube/config.
        (None, Some(name)) => kube::Config::from_kubeconfig(&options)
            .await
            .with_context(|| format!("using context {name} of the default kubeconfig"))?,
        // KUBECONFIG or ~/.kube/config, then the in-cluster service account.
        (None, None) => kube::Config::infer()
            .await
            .context("finding a kubeconfig (set --kubeconfig or KUBECONFIG)")?,
    };
    Ok(config)
}
