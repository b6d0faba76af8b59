//! `tenantplane up`: a local playground. Starts a host and a tenant API server,
//! installs tenantplane, attaches the tenant as TenantCluster `team-dev/dev`, runs
//! the controller in the foreground and prints every decision as it happens.

use std::sync::Arc;

use anyhow::Context;
use k8s_openapi::ByteString;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client, Resource};
use tenantplane_api::{
    ControlPlane, ExternalControlPlane, IsolationLevel, IsolationProfile, IsolationProfileSpec,
    LocalRef, SecretKeyRef, SyncPolicy, SyncPolicySpec, TenantCluster, TenantClusterSpec,
};
use tenantplane_engine::controller::{self, ControllerConfig};
use tenantplane_engine::decisions::TenantDecision;
use tenantplane_engine::metrics::Metrics;
use tenantplane_testenv::node::image::Image;
use tenantplane_testenv::{ApiServerOptions, RealNode, TestEnv};
use tokio::signal::unix::{SignalKind, signal};
use tokio::sync::broadcast;
use tokio_util::sync::CancellationToken;

use crate::logging::{self, LogFormat};

const HOST_NAMESPACE: &str = "team-dev";
const TENANT: &str = "dev";
const KUBELET_CLIENT_SECRET: &str = "dev-kubelet-client";
/// The image `up --real-node` makes of its own binary.
const TENANTPLANE_IMAGE: &str = "local/tenantplane:dev";
/// The tenant control plane's controllers that make Pods from workloads.
const TENANT_CONTROLLERS: &str = "deployment,replicaset,statefulset,daemonset,job,cronjob";

#[derive(Debug, clap::Args)]
pub struct UpArgs {
    /// Concurrent host writers per synced kind.
    #[arg(long, default_value_t = 16)]
    pub workers: usize,
    /// Keep the playground's directory (logs, kubeconfigs) after exit.
    #[arg(long)]
    pub keep: bool,
    /// Stop once the TenantCluster has synced the demo object (for scripts and CI).
    #[arg(long)]
    pub exit_when_synced: bool,
    /// Also run a real node for the host (containerd, kubelet, kube-proxy,
    /// kube-scheduler), so synced Pods really run, with images local/busybox:1 and
    /// local/pause:1 (imagePullPolicy: Never). Needs root and the binaries of
    /// scripts/real-node-assets.sh. It changes machine-wide settings: iptables
    /// rules, sysctls (ip_forward and the kubelet's vm/kernel ones), bridges rn0 and
    /// rncni0 (10.99.0.1, Pods on 10.244.0.0/24), mounts and kubepods cgroups; all
    /// are restored on exit (Ctrl-C included), or by the next run if this one is
    /// killed. One node per machine. The node also gets image local/tenantplane:dev,
    /// made of this binary.
    #[arg(long)]
    pub real_node: bool,
    #[arg(long, value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

pub fn run(args: UpArgs) -> anyhow::Result<()> {
    // Decisions go to stdout; the log only says what went wrong.
    // The readiness poll of the starting API servers logs every 500 as an error.
    logging::init(args.log_format, "warn,kube_client::client::builder=off")?;
    let runtime = tokio::runtime::Runtime::new().context("starting the async runtime")?;
    runtime.block_on(up(args))
}

fn meta(name: &str, namespace: Option<&str>) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: namespace.map(str::to_owned),
        ..ObjectMeta::default()
    }
}

async fn create<K>(client: &Client, object: &K) -> anyhow::Result<()>
where
    K: Resource<DynamicType = (), Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::Serialize
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
{
    let namespace = object.meta().namespace.clone().unwrap_or_default();
    Api::<K>::namespaced(client.clone(), &namespace)
        .create(&PostParams::default(), object)
        .await
        .with_context(|| {
            format!(
                "creating {} {namespace}/{}",
                K::kind(&()),
                object.meta().name.clone().unwrap_or_default()
            )
        })?;
    Ok(())
}

async fn up(args: UpArgs) -> anyhow::Result<()> {
    if args.real_node
        && let Some(reason) = RealNode::unavailable()
    {
        anyhow::bail!("--real-node: {reason}");
    }
    eprintln!("starting etcd and two API servers (host and tenant)...");
    let env = TestEnv::start().await.context("starting etcd")?;
    let mut host_options = ApiServerOptions::stock("host");
    // Pods on the real node (the tenant DNS server) use in-cluster config.
    host_options.service_account_admission = args.real_node;
    let host_server = env
        .start_apiserver_with(host_options)
        .await
        .context("starting the host API server")?;
    // The tenant API server presents this client certificate to tenantplane's
    // kubelet endpoint (`kubectl logs`, `exec`); the TenantCluster names it below.
    let kubelet_client = env
        .ca()
        .issue(&["tenantplane-kubelet-client"])
        .context("issuing the kubelet client certificate")?;
    let kubelet_dir = env.root().join("kubelet-client");
    std::fs::create_dir_all(&kubelet_dir).context("creating the kubelet client directory")?;
    let (client_crt, client_key) = (kubelet_dir.join("tls.crt"), kubelet_dir.join("tls.key"));
    std::fs::write(&client_crt, &kubelet_client.cert_pem).context("writing tls.crt")?;
    std::fs::write(&client_key, &kubelet_client.key_pem).context("writing tls.key")?;
    let mut tenant_options = ApiServerOptions::stock("tenant");
    tenant_options.extra_args = vec![
        format!("--kubelet-client-certificate={}", client_crt.display()),
        format!("--kubelet-client-key={}", client_key.display()),
    ];
    let tenant_server = env
        .start_apiserver_with(tenant_options)
        .await
        .context("starting the tenant API server")?;
    let node = if args.real_node {
        eprintln!("starting a real node (containerd, kubelet, kube-proxy, kube-scheduler)...");
        let mut node = RealNode::start(&host_server)
            .await
            .context("starting the real node")?;
        node.serve_api_to_pods(&host_server)
            .await
            .context("letting Pods reach the host API server")?;
        // This very binary as an image, for the Pods that run tenantplane itself.
        let exe = std::env::current_exe().context("finding the tenantplane binary")?;
        let image = Image::with_shared_libraries(TENANTPLANE_IMAGE, &exe, "tenantplane")
            .context("making the tenantplane image")?;
        node.import(&image)
            .context("importing the tenantplane image")?;
        Some(node)
    } else {
        None
    };
    let host = host_server.client().await?;
    let tenant = tenant_server.client().await?;
    // The tenant's workload controllers, so `kubectl create deployment` makes Pods.
    let _tenant_controllers = env
        .start_controller_manager_with(&tenant_server, TENANT_CONTROLLERS)
        .context("starting the tenant's kube-controller-manager")?;

    host_server
        .install_crds(tenantplane_api::crds())
        .await
        .context("installing the CRDs")?;
    Api::<Namespace>::all(host.clone())
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta(HOST_NAMESPACE, None),
                ..Namespace::default()
            },
        )
        .await
        .context("creating namespace team-dev")?;
    let profile = IsolationProfile {
        metadata: meta("restricted", None),
        spec: IsolationProfileSpec::for_level(IsolationLevel::Restricted),
    };
    Api::<IsolationProfile>::all(host.clone())
        .create(&PostParams::default(), &profile)
        .await
        .context("creating the IsolationProfile")?;
    let policy = SyncPolicy {
        metadata: meta("default", None),
        spec: SyncPolicySpec::default_policy(),
    };
    Api::<SyncPolicy>::all(host.clone())
        .create(&PostParams::default(), &policy)
        .await
        .context("creating the SyncPolicy")?;
    let kubeconfig = tenant_server.kubeconfig_yaml("admin")?;
    let secret = Secret {
        metadata: meta("dev-kubeconfig", Some(HOST_NAMESPACE)),
        data: Some([("kubeconfig".to_owned(), ByteString(kubeconfig.into_bytes()))].into()),
        ..Secret::default()
    };
    create(&host, &secret).await?;
    let kubelet_secret = Secret {
        metadata: meta(KUBELET_CLIENT_SECRET, Some(HOST_NAMESPACE)),
        data: Some(
            [(
                "tls.crt".to_owned(),
                ByteString(kubelet_client.cert_pem.clone().into_bytes()),
            )]
            .into(),
        ),
        ..Secret::default()
    };
    create(&host, &kubelet_secret).await?;
    let mut tc = TenantCluster::new(
        TENANT,
        TenantClusterSpec {
            mode: Default::default(),
            kubernetes_version: "v1.31".into(),
            isolation_profile_ref: LocalRef::new("restricted"),
            sync_policy_ref: LocalRef::new("default"),
            control_plane: ControlPlane {
                external: Some(ExternalControlPlane {
                    kubeconfig_secret_ref: SecretKeyRef {
                        name: "dev-kubeconfig".into(),
                        key: "kubeconfig".into(),
                    },
                    kubelet_client_certificate_secret_ref: Some(LocalRef::new(
                        KUBELET_CLIENT_SECRET,
                    )),
                }),
                ..ControlPlane::default()
            },
            networking: Default::default(),
            migration: Default::default(),
            nodes: Default::default(),
            resources: None,
        },
    );
    tc.metadata.namespace = Some(HOST_NAMESPACE.into());
    create(&host, &tc).await?;

    let (decisions, mut received) = broadcast::channel(4096);
    let shutdown = CancellationToken::new();
    let routes = tenantplane_engine::decisions::DecisionRoutes::new();
    let kubelet = crate::kubelet::start(
        host.clone(),
        std::net::SocketAddr::from(([127, 0, 0, 1], 0)),
        Some("127.0.0.1".into()),
        None,
        routes.clone(),
        shutdown.clone(),
    )
    .await
    .context("starting the kubelet endpoint")?;
    let config = ControllerConfig {
        host: host.clone(),
        metrics: Arc::new(Metrics::unregistered()),
        decisions,
        instance: "tenantplane-up".into(),
        workers: args.workers,
        host_unreachable_release: tenantplane_engine::kind_sync::DEFAULT_HOST_UNREACHABLE_RELEASE,
        // Only external control planes here (the testenv servers share one range).
        service_cidr: tenantplane_engine::provision::DEFAULT_SERVICE_CIDR.into(),
        // Each tenant's DNS server is a Pod: only where Pods really run.
        dns: node
            .as_ref()
            .map(|_| tenantplane_engine::tenant_dns::DnsDeployment {
                image: TENANTPLANE_IMAGE.into(),
                cluster_domain: tenantplane_core::dns::DEFAULT_CLUSTER_DOMAIN.into(),
            }),
        // Tenant Nodes advertise the endpoint: `kubectl logs` in the tenant reaches it.
        kubelet_endpoint: Some(tenantplane_core::pods::KubeletEndpoint {
            address: kubelet.advertise_address.clone(),
            port: kubelet.address.port(),
        }),
        tenant_webhook: None,
        shards: None,
        namespace: None,
    };
    let controller = tokio::spawn(controller::run_with_routes(
        config,
        routes,
        shutdown.clone(),
    ));

    let (host_kc, tenant_kc) = (
        host_server.kubeconfig_path(),
        tenant_server.kubeconfig_path(),
    );
    println!(
        "tenantplane is up: TenantCluster {HOST_NAMESPACE}/{TENANT} syncs the tenant API server into the host"
    );
    println!();
    println!("  host   kubeconfig: {}", host_kc.display());
    println!(
        "  kubelet endpoint:  https://{} (advertised as {}; kubectl logs/exec/attach in the tenant)",
        kubelet.address, kubelet.advertise_address
    );
    println!("  tenant kubeconfig: {}", tenant_kc.display());
    println!();
    println!(
        "  kubectl --kubeconfig {} create configmap hello --from-literal=greeting=hi",
        tenant_kc.display()
    );
    println!(
        "  kubectl --kubeconfig {} -n {HOST_NAMESPACE} get configmaps",
        host_kc.display()
    );
    println!(
        "  kubectl --kubeconfig {} -n {HOST_NAMESPACE} describe tenantcluster {TENANT}",
        host_kc.display()
    );
    println!(
        "  tenantplane why --kubeconfig {} -n {HOST_NAMESPACE} configmap/welcome-x-default-x-{TENANT}",
        host_kc.display()
    );
    if let Some(node) = &node {
        println!();
        println!(
            "  real node {} (logs in {}); Pods that really run, found by the tenant's DNS:",
            node.name(),
            node.dir().display()
        );
        let t = tenant_kc.display();
        println!(
            "  kubectl --kubeconfig {t} create deployment web --image=local/busybox:1 -- httpd -f -p 8080 -h /www"
        );
        println!("  kubectl --kubeconfig {t} expose deployment web --port 80 --target-port 8080");
        println!(
            "  kubectl --kubeconfig {t} run client --image=local/busybox:1 --restart=Never -- sleep 3600"
        );
        println!("  kubectl --kubeconfig {t} exec client -- wget -qO- http://web/");
        println!(
            "  kubectl --kubeconfig {} run tp --image={TENANTPLANE_IMAGE} --image-pull-policy=Never --restart=Never -- /tenantplane version",
            tenant_kc.display()
        );
    }
    println!();
    println!("decisions (Ctrl-C stops everything):");

    // A first object, so the first decision shows up at once.
    let welcome = ConfigMap {
        metadata: meta("welcome", Some("default")),
        data: Some([("message".to_owned(), "synced by tenantplane".to_owned())].into()),
        ..ConfigMap::default()
    };
    create(&tenant, &welcome).await?;

    let mut terminate = signal(SignalKind::terminate()).context("handling SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("handling SIGINT")?;
    loop {
        tokio::select! {
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
            decision = received.recv() => match decision {
                Ok(decision) => {
                    print_decision(&decision);
                    if args.exit_when_synced && decision.record.tenant.name == "welcome" {
                        break;
                    }
                }
                Err(broadcast::error::RecvError::Lagged(n)) => println!("({n} decisions not shown: printing fell behind)"),
                Err(broadcast::error::RecvError::Closed) => break,
            },
        }
    }
    eprintln!("stopping...");
    shutdown.cancel();
    controller.await.context("the controller task")?;
    // The node first: it restores the machine, and its kubelet talks to the host.
    if node.is_some() {
        eprintln!("stopping the real node and restoring the machine...");
    }
    drop(node);
    drop((host_server, tenant_server));
    if args.keep {
        eprintln!("kept {}", env.keep_dir().display());
    }
    Ok(())
}

fn print_decision(decision: &TenantDecision) {
    let r = &decision.record;
    let time = r.time.0.strftime("%H:%M:%S");
    println!(
        "{time} {:<6} {} {}/{} -> {}/{}: {}",
        r.action.as_str(),
        r.kind,
        r.tenant.namespace,
        r.tenant.name,
        r.host.namespace,
        r.host.name,
        r.reason
    );
}
