//! `tenantplane render`: tenantplane resources from a few flags.

use anyhow::{Context, bail};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tenantplane_api::{
    ClusterMode, ControlPlane, ExternalControlPlane, IsolationLevel, IsolationProfile,
    IsolationProfileSpec, LocalRef, SecretKeyRef, SyncPolicy, SyncPolicySpec, TenantCluster,
    TenantClusterSpec,
};
use tenantplane_core::names::{NameRule, validate_namespace_name, validate_tenant_name};

use crate::output::{self, Format};

#[derive(Debug, clap::Subcommand)]
pub enum RenderTarget {
    /// A TenantCluster.
    Tenantcluster {
        name: String,
        /// Namespace of the TenantCluster on the host.
        #[arg(short, long, default_value = "default")]
        namespace: String,
        /// IsolationProfile to reference.
        #[arg(long, default_value = "restricted")]
        profile: String,
        /// SyncPolicy to reference.
        #[arg(long, default_value = "default")]
        sync_policy: String,
        #[arg(long, default_value = "v1.31")]
        kubernetes_version: String,
        #[arg(long, value_enum, default_value_t = ModeArg::Shared)]
        mode: ModeArg,
        /// Attach an existing API server: a Secret in the namespace holding its kubeconfig.
        #[arg(long)]
        kubeconfig_secret: Option<String>,
        /// Key of the kubeconfig in that Secret.
        #[arg(long, default_value = "kubeconfig", requires = "kubeconfig_secret")]
        kubeconfig_key: String,
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
        output: Format,
    },
    /// An IsolationProfile at one of the built-in levels: baseline, restricted, sandboxed.
    Isolationprofile {
        name: String,
        /// The level; defaults to NAME when NAME is a level.
        #[arg(long)]
        level: Option<String>,
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
        output: Format,
    },
    /// A SyncPolicy with the default kinds (ConfigMap, Secret, Service, Pod to the host).
    Syncpolicy {
        name: String,
        #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
        output: Format,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    Shared,
    Dedicated,
    Private,
}

pub fn run(target: RenderTarget) -> anyhow::Result<String> {
    match target {
        RenderTarget::Tenantcluster {
            name,
            namespace,
            profile,
            sync_policy,
            kubernetes_version,
            mode,
            kubeconfig_secret,
            kubeconfig_key,
            output,
        } => {
            validate_tenant_name(&name).context("invalid TenantCluster name")?;
            validate_namespace_name(&namespace).context("invalid namespace")?;
            NameRule::Dns1123Subdomain
                .validate(&profile)
                .context("invalid --profile")?;
            NameRule::Dns1123Subdomain
                .validate(&sync_policy)
                .context("invalid --sync-policy")?;
            if !is_kubernetes_version(&kubernetes_version) {
                bail!(
                    "invalid --kubernetes-version {kubernetes_version:?}: expected v1.MINOR, such as v1.31"
                );
            }
            let external = match kubeconfig_secret {
                Some(secret) => {
                    NameRule::Dns1123Subdomain
                        .validate(&secret)
                        .context("invalid --kubeconfig-secret")?;
                    if kubeconfig_key.is_empty() {
                        bail!("invalid --kubeconfig-key: must not be empty");
                    }
                    Some(ExternalControlPlane {
                        kubeconfig_secret_ref: SecretKeyRef {
                            name: secret,
                            key: kubeconfig_key,
                        },
                    })
                }
                None => None,
            };
            let spec = TenantClusterSpec {
                mode: match mode {
                    ModeArg::Shared => ClusterMode::Shared,
                    ModeArg::Dedicated => ClusterMode::Dedicated,
                    ModeArg::Private => ClusterMode::Private,
                },
                kubernetes_version,
                isolation_profile_ref: LocalRef::new(profile),
                sync_policy_ref: LocalRef::new(sync_policy),
                control_plane: ControlPlane {
                    external,
                    ..ControlPlane::default()
                },
                networking: Default::default(),
                migration: Default::default(),
                resources: None,
            };
            let mut tc = TenantCluster::new(&name, spec);
            tc.metadata.namespace = Some(namespace);
            output::render(&tc, output)
        }
        RenderTarget::Isolationprofile {
            name,
            level,
            output,
        } => {
            NameRule::Dns1123Subdomain
                .validate(&name)
                .context("invalid IsolationProfile name")?;
            let level_name = level.unwrap_or_else(|| name.clone());
            let Some(level) = IsolationLevel::parse(&level_name) else {
                bail!(
                    "unknown isolation level {level_name:?}: expected one of baseline, restricted, sandboxed (pass --level when NAME is not a level)"
                );
            };
            let profile = IsolationProfile {
                metadata: ObjectMeta {
                    name: Some(name),
                    ..ObjectMeta::default()
                },
                spec: IsolationProfileSpec::for_level(level),
            };
            output::render(&profile, output)
        }
        RenderTarget::Syncpolicy { name, output } => {
            NameRule::Dns1123Subdomain
                .validate(&name)
                .context("invalid SyncPolicy name")?;
            let policy = SyncPolicy {
                metadata: ObjectMeta {
                    name: Some(name),
                    ..ObjectMeta::default()
                },
                spec: SyncPolicySpec::default_policy(),
            };
            output::render(&policy, output)
        }
    }
}

/// `v1.MINOR` or `v1.MINOR.PATCH`, the schema's pattern.
fn is_kubernetes_version(v: &str) -> bool {
    let Some(rest) = v.strip_prefix("v1.") else {
        return false;
    };
    let mut parts = rest.split('.');
    let numeric =
        |p: Option<&str>| p.is_some_and(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()));
    let minor_ok = numeric(parts.next());
    match parts.next() {
        None => minor_ok,
        Some(patch) => minor_ok && numeric(Some(patch)) && parts.next().is_none(),
    }
}
