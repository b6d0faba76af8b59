//! `tenantplane render`: tenantplane resources from a few flags.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use tenantplane_admission::{
    WebhookClient, namespace_webhook_configuration, webhook_configuration,
};
use tenantplane_api::{
    ClusterMode, ControlPlane, Distro, EgressPolicy, ExternalControlPlane, IsolationLevel,
    IsolationProfile, IsolationProfileSpec, LocalRef, ResourceLimits, SecretKeyRef, SyncPolicy,
    SyncPolicySpec, TenantCluster, TenantClusterSpec,
};
use tenantplane_core::isolation::{self, IsolationError, IsolationInput};
use tenantplane_core::name_rules::{NameRule, validate_namespace_name, validate_tenant_name};
use tenantplane_core::{validation, versions};

use crate::output::{self, Format};

#[derive(Debug, clap::Subcommand)]
pub enum RenderTarget {
    /// A CA and the webhook's serving certificate made by tenantplane, written into
    /// the self-signed kustomize overlay (instead of cert-manager).
    WebhookCertificate(crate::webhook_certificate::WebhookCertificateArgs),
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
        /// Distribution of the provisioned control plane (ignored with
        /// --kubeconfig-secret, which attaches an existing one).
        #[arg(long, value_enum, default_value_t = DistroArg::K3s, conflicts_with = "kubeconfig_secret")]
        distro: DistroArg,
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
    /// The host objects an IsolationProfile compiles to for one tenant's namespace:
    /// Namespace (Pod Security labels), NetworkPolicy, ResourceQuota, LimitRange.
    Isolation(IsolationArgs),
    /// The ValidatingWebhookConfiguration that sends tenantplane's resources to
    /// `tenantplane webhook`, reached by URL or through a Service.
    Webhookconfiguration {
        /// PEM file of the CA that signed the webhook's serving certificate.
        #[arg(long)]
        ca_bundle: PathBuf,
        /// The webhook's full URL, such as https://127.0.0.1:8443/validate.
        #[arg(long, conflicts_with = "service", required_unless_present = "service")]
        url: Option<String>,
        /// The webhook's Service as NAMESPACE/NAME (path /validate).
        #[arg(long)]
        service: Option<String>,
        /// The Service port (the API server's default is 443).
        #[arg(long, requires = "service")]
        port: Option<i32>,
        /// Render the MutatingWebhookConfiguration for namespace tenancy instead
        /// (namespace creations and updates on /namespaces, writes inside tenant
        /// namespaces on /tenant-resources; a --url is the server's base; serve it
        /// with `tenantplane webhook --namespace-tenancy`).
        #[arg(long)]
        namespaces: bool,
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

#[derive(Debug, clap::Args)]
pub struct IsolationArgs {
    /// A built-in level (baseline, restricted, sandboxed) or, with -f, the name of
    /// the IsolationProfile in the file.
    #[arg(long)]
    pub profile: String,
    /// The tenant's host namespace.
    #[arg(short, long)]
    pub namespace: String,
    /// The TenantCluster's name; defaults to the namespace.
    #[arg(long)]
    pub tenant: Option<String>,
    /// CPU cap for the ResourceQuota, such as 8 or 500m.
    #[arg(long)]
    pub cpu: Option<String>,
    /// Memory cap for the ResourceQuota, such as 16Gi.
    #[arg(long)]
    pub memory: Option<String>,
    /// The TenantCluster's networking.egressPolicy.
    #[arg(long, value_enum, default_value_t = EgressArg::AllowDns)]
    pub egress: EgressArg,
    /// A YAML file (or - for stdin) holding the IsolationProfile named by --profile.
    #[arg(short = 'f', long = "filename")]
    pub file: Option<PathBuf>,
    #[arg(short = 'o', long = "output", value_enum, default_value_t = Format::Yaml)]
    pub output: Format,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum EgressArg {
    #[value(name = "denyAll")]
    DenyAll,
    #[value(name = "allowDNS")]
    AllowDns,
    #[value(name = "allowAll")]
    AllowAll,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum DistroArg {
    K3s,
    K8s,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
    Shared,
    Dedicated,
    Private,
}

pub fn run(target: RenderTarget) -> anyhow::Result<String> {
    match target {
        RenderTarget::WebhookCertificate(args) => crate::webhook_certificate::run(args),
        RenderTarget::Tenantcluster {
            name,
            namespace,
            profile,
            sync_policy,
            kubernetes_version,
            mode,
            distro,
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
            versions::resolve(&kubernetes_version).context("invalid --kubernetes-version")?;
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
                        kubelet_client_certificate_secret_ref: None,
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
                    distro: match distro {
                        DistroArg::K3s => Distro::K3s,
                        DistroArg::K8s => Distro::K8s,
                    },
                    ..ControlPlane::default()
                },
                networking: Default::default(),
                migration: Default::default(),
                nodes: Default::default(),
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
        RenderTarget::Isolation(args) => render_isolation(args),
        RenderTarget::Webhookconfiguration {
            ca_bundle,
            url,
            service,
            port,
            namespaces,
            output,
        } => {
            let client = match (url, service) {
                (Some(url), _) => {
                    if !url.starts_with("https://") {
                        bail!("invalid --url {url:?}: the API server calls webhooks over https://");
                    }
                    WebhookClient::Url(url)
                }
                (None, Some(service)) => {
                    let Some((namespace, name)) = service.split_once('/') else {
                        bail!("invalid --service {service:?}: expected NAMESPACE/NAME");
                    };
                    validate_namespace_name(namespace).context("invalid --service namespace")?;
                    NameRule::Dns1035Label
                        .validate(name)
                        .context("invalid --service name")?;
                    WebhookClient::Service {
                        namespace: namespace.to_owned(),
                        name: name.to_owned(),
                        port,
                    }
                }
                (None, None) => bail!("pass --url or --service"),
            };
            let pem = std::fs::read(&ca_bundle)
                .with_context(|| format!("reading {}", ca_bundle.display()))?;
            if !String::from_utf8_lossy(&pem).contains("-----BEGIN CERTIFICATE-----") {
                bail!("{} holds no PEM certificate", ca_bundle.display());
            }
            if namespaces {
                output::render(&namespace_webhook_configuration(client, &pem), output)
            } else {
                output::render(&webhook_configuration(client, &pem), output)
            }
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

fn render_isolation(args: IsolationArgs) -> anyhow::Result<String> {
    let spec = match &args.file {
        Some(path) => profile_from_file(path, &args.profile)?,
        None => match IsolationLevel::parse(&args.profile) {
            Some(level) => IsolationProfileSpec::for_level(level),
            None => bail!(
                "unknown built-in profile {:?}: expected baseline, restricted or sandboxed, or pass -f FILE holding an IsolationProfile of that name",
                args.profile
            ),
        },
    };
    let quantity = |q: Option<String>| q.map(Quantity);
    let resources = (args.cpu.is_some() || args.memory.is_some()).then(|| ResourceLimits {
        cpu: quantity(args.cpu),
        memory: quantity(args.memory),
    });
    let tenant = args.tenant.as_deref().unwrap_or(&args.namespace);
    let objects = isolation::compile(&IsolationInput {
        pods: isolation::PodScope::TenantCluster,
        tenant,
        host_namespace: &args.namespace,
        profile: &spec,
        resources: resources.as_ref(),
        egress: match args.egress {
            EgressArg::DenyAll => EgressPolicy::DenyAll,
            EgressArg::AllowDns => EgressPolicy::AllowDns,
            EgressArg::AllowAll => EgressPolicy::AllowAll,
        },
    })
    .map_err(|err| match err {
        // The tenant name was not given: say where it came from.
        IsolationError::Tenant(_) if args.tenant.is_none() => {
            anyhow::anyhow!("{err} (--tenant defaults to --namespace; pass --tenant)")
        }
        err => err.into(),
    })?;
    let manifests = objects
        .to_manifests()
        .context("rendering the isolation objects")?;
    output::render_list(&manifests, args.output)
}

/// The spec of the IsolationProfile named `name` in a YAML stream, checked with the
/// webhook's rules.
fn profile_from_file(path: &Path, name: &str) -> anyhow::Result<IsolationProfileSpec> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin()).context("reading stdin")?
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    let docs: Vec<serde_json::Value> = serde_saphyr::from_multiple(&text)
        .with_context(|| format!("{} is not YAML", path.display()))?;
    let mut found = Vec::new();
    for doc in docs {
        if doc["kind"] != "IsolationProfile" {
            continue;
        }
        let doc_name = doc["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        if doc_name != name {
            found.push(doc_name);
            continue;
        }
        let expected = format!("{}/{}", tenantplane_api::GROUP, tenantplane_api::VERSION);
        if doc["apiVersion"] != expected.as_str() {
            bail!(
                "IsolationProfile {name:?} in {} has apiVersion {}: expected {expected}",
                path.display(),
                doc["apiVersion"]
            );
        }
        let profile: IsolationProfile = serde_json::from_value(doc).with_context(|| {
            format!(
                "IsolationProfile {name:?} in {} is malformed",
                path.display()
            )
        })?;
        let violations = validation::isolation_profile(&profile.spec);
        if !violations.is_empty() {
            let joined: Vec<String> = violations.iter().map(ToString::to_string).collect();
            bail!(
                "IsolationProfile {name:?} in {} is invalid: {}",
                path.display(),
                joined.join("; ")
            );
        }
        return Ok(profile.spec);
    }
    bail!(
        "no IsolationProfile named {name:?} in {} (found: {})",
        path.display(),
        if found.is_empty() {
            "none".to_owned()
        } else {
            found.join(", ")
        }
    )
}
