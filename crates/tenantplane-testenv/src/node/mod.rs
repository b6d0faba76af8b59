//! A real single-node data plane attached to a test API server: containerd + runc,
//! bridge CNI, kubelet, kube-proxy (iptables), kube-scheduler and the
//! kube-controller-manager controllers a node needs, so Pods really run.
//!
//! The recipe and its figures are in ../shared/docs/real-node.md. The node changes
//! machine-wide state (iptables, sysctls, links, cgroups), so:
//! - it needs root ([`RealNode::unavailable`] says why it cannot run, for tests to skip);
//! - one node runs per machine: [`RealNode::start`] waits for an exclusive lock on
//!   [`LOCK_FILE`] and holds it while the node lives;
//! - everything is undone when the node drops (also when starting fails), and what a
//!   run killed without unwinding left behind is undone by the next start.
//!
//! The node's name and address is [`NODE_IP`], on a bridge with no uplink; Pods get
//! [`POD_CIDR`] and routes only to the Service range and the node. Images come only
//! from this machine: `local/busybox:1` and `local/pause:1` (see [`image`]); Pods use
//! them with `imagePullPolicy: Never`.

mod api_relay;
mod config;
mod docker_stub;
pub mod image;
mod machine;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Node;
use kube::Api;

pub use config::{NODE_IP, POD_CIDR, SERVICE_CIDR};
use image::Image;

use crate::process::ManagedChild;
use crate::server::ApiServer;
use crate::{Error, Result, io_err};

/// Held while a node runs: one node per machine.
pub const LOCK_FILE: &str = "/tmp/tenantplane-real-node.lock";
/// The node's files: configs, logs, containerd and kubelet state, the snapshot of
/// the machine state it restores.
pub const NODE_DIR: &str = "/tmp/tenantplane-real-node";
/// The busybox-static binary the workload image is made of.
const BUSYBOX: &str = "/bin/busybox";
const READY_TIMEOUT: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(250);

/// Controllers the node needs: node lifecycle (lifts the not-ready taint new nodes
/// get, or the scheduler places nothing), endpoints and EndpointSlices (what
/// kube-proxy routes Services by), the workload controllers whose Pods the host
/// runs, and the service-account controllers (each namespace's `default` account and
/// its token, for Pods that use in-cluster config: see [`RealNode::serve_api_to_pods`]). Namespace and garbage collection stay with the test's own controller manager
/// ([`crate::TestEnv::start_controller_manager`]), so the two never duplicate work.
pub const NODE_CONTROLLERS: &str = "nodelifecycle,endpoint,endpointslice,endpointslicemirroring,\
                                    replicaset,deployment,statefulset,daemonset,job,podgc,ttl,\
                                    serviceaccount,serviceaccount-token";

const NODE_BINARIES: [&str; 5] = [
    "kubelet",
    "kube-proxy",
    "kube-scheduler",
    "kube-controller-manager",
    "pause",
];

/// Where the node's Kubernetes binaries are: `$TENANTPLANE_NODE_ASSETS`,
/// `$KUBEBUILDER_ASSETS`, then the cache scripts/real-node-assets.sh fills.
pub fn node_assets() -> Result<PathBuf> {
    let cache = std::env::var_os("TENANTPLANE_CACHE")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| Path::new(&h).join(".cache/tenantplane")))
        .map(|c| c.join("k8s-1.20.2/bin"));
    let candidates: Vec<PathBuf> = [
        std::env::var_os("TENANTPLANE_NODE_ASSETS").map(PathBuf::from),
        std::env::var_os("KUBEBUILDER_ASSETS").map(PathBuf::from),
        cache,
    ]
    .into_iter()
    .flatten()
    .filter(|d| !d.as_os_str().is_empty())
    .collect();
    candidates
        .iter()
        .find(|d| NODE_BINARIES.iter().all(|b| d.join(b).is_file()))
        .cloned()
        .ok_or_else(|| {
            Error::NoAssets(format!(
                "no directory of {} holds {}; run scripts/real-node-assets.sh",
                candidates
                    .iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", "),
                NODE_BINARIES.join(", ")
            ))
        })
}

/// A running real node. Dropping it stops everything and restores the machine.
pub struct RealNode {
    dir: PathBuf,
    /// containerd first; stopped in reverse order.
    children: Vec<ManagedChild>,
    started: Instant,
    /// Set by [`RealNode::serve_api_to_pods`].
    api_relay: Option<api_relay::ApiRelay>,
    /// Started with the kubelet (see [`docker_stub`]).
    docker_stub: Option<docker_stub::DockerStub>,
    // Released last, after the machine is restored.
    _lock: File,
}

impl RealNode {
    /// Why a real node cannot run here (`None` when it can): tests skip with this.
    pub fn unavailable() -> Option<String> {
        // The effective uid, the third field of `Uid:`.
        let root = std::fs::read_to_string("/proc/self/status")
            .ok()
            .and_then(|s| {
                s.lines()
                    .find(|l| l.starts_with("Uid:"))
                    .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
            })
            .unwrap_or(false);
        if !root {
            return Some("a real node needs root (containerd, iptables, cgroups)".into());
        }
        for tool in ["containerd", "ctr", "runc", "iptables-save", "ip"] {
            if which(tool).is_none() {
                return Some(format!(
                    "{tool} is not installed; run scripts/real-node-assets.sh"
                ));
            }
        }
        None
    }

    /// Starts a node registered with `server` and waits until it is Ready and
    /// schedulable. Waits first for any other node on this machine to stop.
    pub async fn start(server: &ApiServer) -> Result<Self> {
        Self::start_with_assets(server, &node_assets()?).await
    }

    /// [`RealNode::start`] with the binaries (`kubelet`, `kube-proxy`,
    /// `kube-scheduler`, `kube-controller-manager`, `pause`) in `assets`.
    pub async fn start_with_assets(server: &ApiServer, assets: &Path) -> Result<Self> {
        if let Some(reason) = Self::unavailable() {
            return Err(Error::Node(reason));
        }
        let lock = tokio::task::spawn_blocking(lock)
            .await
            .map_err(|e| Error::Node(format!("lock task: {e}")))??;
        let dir = PathBuf::from(NODE_DIR);
        if dir.exists() {
            // A run that died without unwinding: undo what it left first.
            let failures = machine::restore(&dir);
            tracing::warn!(?failures, "cleaned up a real node left by an earlier run");
        }
        if Path::new("/sys/class/net")
            .join(config::NODE_BRIDGE)
            .exists()
        {
            return Err(Error::Node(format!(
                "link {} exists but {NODE_DIR} does not: another node runs here outside \
                 this lock (scripts or a manual run); stop it first",
                config::NODE_BRIDGE
            )));
        }
        let mut node = RealNode {
            dir,
            children: Vec::new(),
            started: Instant::now(),
            api_relay: None,
            docker_stub: None,
            _lock: lock,
        };
        // From here on, an error drops `node`, which undoes what was done so far.
        node.prepare()?;
        node.start_containerd().await?;
        node.import_images(assets)?;
        node.start_node_processes(assets, server)?;
        node.wait_ready(server).await?;
        tracing::info!(
            node = NODE_IP,
            seconds = node.started.elapsed().as_secs_f32(),
            "real node Ready"
        );
        Ok(node)
    }

    /// Lets Pods use in-cluster config against `server` as on a real cluster: a
    /// relay on the node IP to the server's loopback port, published as the
    /// `default/kubernetes` Service's endpoints. Start `server` with
    /// [`crate::ApiServerOptions::service_account_admission`] so Pods get tokens.
    /// Returns the relay's address; it stops when the node drops.
    pub async fn serve_api_to_pods(&mut self, server: &ApiServer) -> Result<std::net::SocketAddr> {
        let relay = api_relay::start(server).await?;
        let address = relay.address;
        self.api_relay = Some(relay);
        Ok(address)
    }

    /// The node's name (also its IP).
    pub fn name(&self) -> &str {
        NODE_IP
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The last lines of one of the node's processes' logs (`kubelet`, `containerd`,
    /// `kube-proxy`, `kube-scheduler`, `kube-controller-manager`).
    pub fn log_tail(&self, process: &str, lines: usize) -> String {
        crate::process::log_tail(&self.dir.join(format!("{process}.log")), lines)
    }

    fn prepare(&self) -> Result<()> {
        for sub in ["containerd", "cni/net.d", "cni/ipam", "kubelet", "images"] {
            let path = self.dir.join(sub);
            std::fs::create_dir_all(&path).map_err(io_err(format!("create {}", path.display())))?;
        }
        machine::snapshot(&self.dir)?;
        let bridge = config::NODE_BRIDGE;
        machine::run("ip", &["link", "add", bridge, "type", "bridge"])?;
        machine::run(
            "ip",
            &["addr", "add", &format!("{NODE_IP}/32"), "dev", bridge],
        )?;
        machine::run("ip", &["link", "set", bridge, "up"])?;
        // Routing Pod -> Service -> Pod through the host, and un-NATing the reply that
        // crosses the bridge directly.
        machine::set_sysctl("net/ipv4/ip_forward", "1")?;
        if Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables").exists() {
            machine::set_sysctl("net/bridge/bridge-nf-call-iptables", "1")?;
        }
        self.write("containerd/config.toml", &config::containerd(&self.dir))?;
        self.write("cni/net.d/10-tenantplane.conflist", &config::cni(&self.dir))?;
        self.write("kubelet/config.yaml", &config::kubelet(&self.dir))
    }

    fn write(&self, name: &str, contents: &str) -> Result<()> {
        let path = self.dir.join(name);
        std::fs::write(&path, contents).map_err(io_err(format!("write {}", path.display())))
    }

    fn socket(&self) -> PathBuf {
        self.dir.join("containerd/containerd.sock")
    }

    fn spawn(&mut self, name: &str, program: &Path, args: Vec<String>) -> Result<()> {
        let log = self.dir.join(format!("{name}.log"));
        let child = ManagedChild::spawn(name, program, &args, log)?;
        self.children.push(child);
        Ok(())
    }

    /// Fails with the log tail of a node process that exited.
    fn check_children(&mut self) -> Result<()> {
        for child in &mut self.children {
            if let Some(status) = child.exited() {
                return Err(child.exited_error(status));
            }
        }
        Ok(())
    }

    fn ctr(&self, args: &[&str]) -> Result<String> {
        let socket = self.socket().display().to_string();
        let mut all = vec!["-a", socket.as_str(), "-n", "k8s.io"];
        all.extend_from_slice(args);
        machine::run("ctr", &all)
    }

    async fn start_containerd(&mut self) -> Result<()> {
        let config = self.dir.join("containerd/config.toml");
        let containerd = which("containerd").ok_or_else(|| Error::Node("no containerd".into()))?;
        self.spawn(
            "containerd",
            &containerd,
            vec!["--config".into(), config.display().to_string()],
        )?;
        let deadline = Instant::now() + Duration::from_secs(30);
        while self.ctr(&["version"]).is_err() {
            self.check_children()?;
            if Instant::now() > deadline {
                return Err(self.not_ready("containerd", 30));
            }
            tokio::time::sleep(POLL).await;
        }
        Ok(())
    }

    fn import_images(&mut self, assets: &Path) -> Result<()> {
        let images = [
            Image::busybox(Path::new(BUSYBOX))?,
            Image::static_binary("local/pause:1", &assets.join("pause"), "pause")?,
        ];
        for image in images {
            self.import(&image)?;
        }
        Ok(())
    }

    /// Makes `image` available to the node's Pods (`imagePullPolicy: Never`).
    pub fn import(&self, image: &Image) -> Result<()> {
        let file_name = format!("{}.tar", image.tag.replace(['/', ':'], "_"));
        let path = self.dir.join("images").join(file_name);
        std::fs::write(&path, image.docker_archive()?)
            .map_err(io_err(format!("write {}", path.display())))?;
        self.ctr(&["images", "import", &path.display().to_string()])?;
        Ok(())
    }

    fn start_node_processes(&mut self, assets: &Path, server: &ApiServer) -> Result<()> {
        let kubeconfig = server.kubeconfig_path();
        let kubeconfig = kubeconfig.as_path();
        let kc = kubeconfig.display().to_string();
        let dir = self.dir.clone();
        let d = |p: &str| dir.join(p).display().to_string();
        let docker_stub = docker_stub::start(&dir.join("docker.sock"))?;
        let kubelet_args = vec![
            format!("--config={}", d("kubelet/config.yaml")),
            format!("--kubeconfig={kc}"),
            format!("--root-dir={}", d("kubelet/root")),
            format!("--cert-dir={}", d("kubelet/pki")),
            "--container-runtime=remote".into(),
            format!(
                "--container-runtime-endpoint=unix://{}",
                self.socket().display()
            ),
            // cAdvisor's Docker endpoint (a deprecated flag, and its only setting).
            format!("--docker={}", docker_stub.endpoint()),
            format!("--node-ip={NODE_IP}"),
            format!("--hostname-override={NODE_IP}"),
            "--pod-infra-container-image=local/pause:1".into(),
            "--v=1".into(),
        ];
        self.docker_stub = Some(docker_stub);
        self.spawn("kubelet", &assets.join("kubelet"), kubelet_args)?;
        self.write("kube-proxy.yaml", &config::kube_proxy(kubeconfig))?;
        let proxy_args = vec![format!("--config={}", d("kube-proxy.yaml"))];
        self.spawn("kube-proxy", &assets.join("kube-proxy"), proxy_args)?;
        let no_serving = ["--leader-elect=false", "--port=0", "--secure-port=0"].map(String::from);
        let mut scheduler_args = vec![format!("--kubeconfig={kc}")];
        scheduler_args.extend(no_serving.iter().cloned());
        self.spawn(
            "kube-scheduler",
            &assets.join("kube-scheduler"),
            scheduler_args,
        )?;
        let mut kcm_args = vec![
            format!("--kubeconfig={kc}"),
            format!("--controllers={NODE_CONTROLLERS}"),
            // Lifts the new node's not-ready taint within a second of Ready, not five.
            "--node-monitor-period=1s".into(),
            "--use-service-account-credentials=false".into(),
            // The token controller signs with the API server's service-account key.
            format!(
                "--service-account-private-key-file={}",
                server.dir().join("sa.key").display()
            ),
        ];
        kcm_args.extend(no_serving.iter().cloned());
        self.spawn(
            "kube-controller-manager",
            &assets.join("kube-controller-manager"),
            kcm_args,
        )
    }

    /// Waits until the Node is Ready and its not-ready taint is gone.
    async fn wait_ready(&mut self, server: &ApiServer) -> Result<()> {
        let nodes: Api<Node> = Api::all(server.client().await?);
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            self.check_children()?;
            if let Ok(Some(node)) = nodes.get_opt(NODE_IP).await
                && schedulable(&node)
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(self.not_ready("kubelet", READY_TIMEOUT.as_secs()));
            }
            tokio::time::sleep(POLL).await;
        }
    }

    fn not_ready(&self, process: &str, seconds: u64) -> Error {
        Error::NotReady {
            process: process.into(),
            seconds,
            log_tail: self.log_tail(process, 30),
        }
    }

    fn teardown(&mut self) {
        self.api_relay = None;
        // The API clients first, so nothing restarts what goes next; containerd
        // (always the first child) stays to remove the containers.
        while self.children.len() > 1 {
            if let Some(mut child) = self.children.pop() {
                child.kill();
            }
        }
        self.docker_stub = None;
        let mut failures = Vec::new();
        if !self.children.is_empty()
            && let Err(err) = machine::stop_containers(&self.socket())
        {
            failures.push(format!("stop containers: {err}"));
        }
        self.children.clear();
        failures.extend(machine::restore(&self.dir));
        if failures.is_empty() {
            tracing::info!(node = NODE_IP, "real node stopped, machine restored");
        } else {
            tracing::error!(?failures, "real node teardown left something behind");
        }
    }
}

impl Drop for RealNode {
    fn drop(&mut self) {
        self.teardown();
    }
}

fn schedulable(node: &Node) -> bool {
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"));
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key.starts_with("node.kubernetes.io/")));
    ready && !tainted
}

/// Blocks until this process holds the machine's node lock.
fn lock() -> Result<File> {
    let file = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .map_err(io_err(format!("open {LOCK_FILE}")))?;
    if file.try_lock().is_err() {
        tracing::info!(lock = LOCK_FILE, "waiting for another real node to stop");
        file.lock().map_err(io_err(format!("lock {LOCK_FILE}")))?;
    }
    Ok(file)
}

fn which(tool: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .chain(["/usr/sbin", "/sbin", "/usr/bin"].map(PathBuf::from))
        .map(|d| d.join(tool))
        .find(|p| p.is_file())
}
