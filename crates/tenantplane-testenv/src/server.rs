//! etcd, kube-apiserver and kube-controller-manager processes.
//!
//! Stays over 500 lines: one start-up sequence (flags, certificates, readiness);
//! splitting it would scatter its order.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::Client;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::assets::Assets;
use crate::certs::{TestCa, signing_key_pair_pem};
use crate::metrics::{RequestCounts, parse_request_counts};
use crate::process::ManagedChild;
use crate::snapshot;
use crate::{Error, Result, io_err};

const READY_TIMEOUT: Duration = Duration::from_secs(90);
const POLL: Duration = Duration::from_millis(100);

/// A user the test API server authenticates by bearer token.
#[derive(Clone, PartialEq, Eq)]
pub struct TestUser {
    pub name: String,
    pub token: String,
    pub groups: Vec<String>,
}

impl std::fmt::Debug for TestUser {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TestUser")
            .field("name", &self.name)
            .field("groups", &self.groups)
            .finish_non_exhaustive()
    }
}

impl TestUser {
    /// A user with a random token.
    pub fn new(name: &str, groups: &[&str]) -> Self {
        Self {
            name: name.to_owned(),
            token: random_token(),
            groups: groups.iter().map(|g| (*g).to_owned()).collect(),
        }
    }
}

fn random_token() -> String {
    // Uniqueness is all a test token needs; a fresh key's bytes are plenty random.
    let seed = format!(
        "{:?}{:?}{}",
        std::time::SystemTime::now(),
        std::thread::current().id(),
        std::process::id()
    );
    let key = signing_key_pair_pem()
        .map(|(private, _)| private)
        .unwrap_or(seed);
    let digest: u64 = key.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3)
    });
    format!("t{digest:016x}{:08x}", std::process::id())
}

/// How to start one API server.
#[derive(Clone, Debug)]
pub struct ApiServerOptions {
    /// Names the server's directory, etcd prefix and log.
    pub name: String,
    /// Users besides `admin` (who is in `system:masters`).
    pub users: Vec<TestUser>,
    /// More `kube-apiserver` flags.
    pub extra_args: Vec<String>,
    /// Run the ServiceAccount admission plugin (off by default: no test Pod needs a
    /// token, and without it Pods need no `default` account). Pods of a real node
    /// that use in-cluster config need it.
    pub service_account_admission: bool,
    /// CRDs the server has, `Established`, once it is ready. The first server with
    /// these CRDs and flags on an etcd installs them; later ones start on a copy of
    /// its storage, which saves most of the CPU (see `snapshot.rs`).
    pub crds: Vec<CustomResourceDefinition>,
    /// Serve every beta API group and run API Priority and Fairness, as a stock
    /// server does (for `tenantplane up`). Off by default: tests use GA groups plus
    /// three betas (EndpointSlices in `discovery.k8s.io`, the PodDisruptionBudgets
    /// kube-scheduler 1.20 lists, and `extensions` Ingresses, which the admission
    /// webhook guards), and without the rest a server starts on about a quarter
    /// less CPU and idles on less.
    pub all_beta_apis: bool,
}

impl ApiServerOptions {
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            users: Vec::new(),
            extra_args: Vec::new(),
            service_account_admission: false,
            crds: Vec::new(),
            all_beta_apis: false,
        }
    }

    /// Options for a server that serves what a stock kube-apiserver serves (see
    /// [`Self::all_beta_apis`]): for `tenantplane up` and the benchmarks.
    pub fn stock(name: &str) -> Self {
        Self {
            all_beta_apis: true,
            ..Self::new(name)
        }
    }
}

/// One etcd serving every API server of a [`TestEnv`].
pub struct Etcd {
    child: ManagedChild,
    url: String,
}

impl Etcd {
    pub fn url(&self) -> &str {
        &self.url
    }

    async fn wait_healthy(&mut self, port: u16) -> Result<()> {
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            if let Some(status) = self.child.exited() {
                return Err(self.child.exited_error(status));
            }
            if etcd_health(port).await {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    process: self.child.name().to_owned(),
                    seconds: READY_TIMEOUT.as_secs(),
                    log_tail: self.child.log_tail(30),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }
}

async fn etcd_health(port: u16) -> bool {
    let Ok(mut stream) = tokio::net::TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    if stream
        .write_all(b"GET /health HTTP/1.0\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut body = String::new();
    let read = tokio::time::timeout(Duration::from_secs(2), stream.read_to_string(&mut body)).await;
    matches!(read, Ok(Ok(_))) && body.contains("\"health\":\"true\"")
}

/// A test control plane: one etcd, any number of API servers.
pub struct TestEnv {
    assets: Assets,
    ca: TestCa,
    /// Before every API server's `--etcd-prefix`: empty on an etcd of its own,
    /// `/envN` on the shared one.
    prefix: String,
    // Dropped last: the processes above it hold files inside.
    etcd: Arc<Etcd>,
    root: tempfile::TempDir,
}

/// A directory for a test environment, on tmpfs when there is one (etcd fsyncs on
/// every write).
fn temp_root() -> Result<tempfile::TempDir> {
    let base = Path::new("/dev/shm");
    let mut builder = tempfile::Builder::new();
    builder.prefix("tenantplane-testenv-");
    if base.is_dir() {
        builder.tempdir_in(base)
    } else {
        builder.tempdir()
    }
    .map_err(io_err("create the test environment directory"))
}

impl TestEnv {
    /// Starts etcd with binaries from [`Assets::locate`].
    pub async fn start() -> Result<Self> {
        Self::start_with(Assets::locate()?).await
    }

    pub async fn start_with(assets: Assets) -> Result<Self> {
        let root = temp_root()?;
        let ca = TestCa::new("tenantplane-testenv-ca")?;
        let etcd = Arc::new(start_etcd(&assets, root.path()).await?);
        Ok(Self {
            assets,
            ca,
            prefix: String::new(),
            etcd,
            root,
        })
    }

    /// An environment of its own (directory, CA, API servers under their own etcd
    /// prefix `/envN/<name>`) on the one etcd every `start_shared` environment of
    /// this process uses: the first call starts it, and it lives until the process
    /// exits (its directory is removed then). For tests: one etcd per test binary,
    /// not one per test.
    pub async fn start_shared() -> Result<Self> {
        let assets = Assets::locate()?;
        let etcd = shared_etcd(&assets)?;
        Ok(Self {
            assets,
            ca: TestCa::new("tenantplane-testenv-ca")?,
            prefix: format!("/env{}", snapshot::next_id()),
            etcd,
            root: temp_root()?,
        })
    }

    pub fn assets(&self) -> &Assets {
        &self.assets
    }

    pub fn etcd(&self) -> &Etcd {
        &self.etcd
    }

    pub fn root(&self) -> &Path {
        self.root.path()
    }

    /// The CA that signed every API server's certificate; it can sign more (webhooks).
    pub fn ca(&self) -> &TestCa {
        &self.ca
    }

    /// Keeps the directory (logs, kubeconfigs) after the environment stops.
    pub fn keep_dir(self) -> PathBuf {
        let TestEnv { etcd, root, .. } = self;
        drop(etcd);
        root.keep()
    }

    /// For an environment kept in a `static` (one control plane for a whole test
    /// binary), which never drops: removes its directory once the process has
    /// exited. Its processes need nothing more: they die with the process
    /// (`PR_SET_PDEATHSIG`).
    pub fn remove_dir_at_exit(&self) -> Result<()> {
        crate::process::remove_at_exit(self.root.path())
    }

    /// Starts an API server named `name` with only the admin user.
    pub async fn start_apiserver(&self, name: &str) -> Result<ApiServer> {
        self.start_apiserver_with(ApiServerOptions::new(name)).await
    }

    /// Starts an API server named `name` with only the admin user and `crds`
    /// (see [`ApiServerOptions::crds`]).
    pub async fn start_apiserver_with_crds(
        &self,
        name: &str,
        crds: Vec<CustomResourceDefinition>,
    ) -> Result<ApiServer> {
        let mut options = ApiServerOptions::new(name);
        options.crds = crds;
        self.start_apiserver_with(options).await
    }

    /// Starts an API server and waits until it is ready and has its CRDs. Its
    /// storage starts as a copy of the first one of its kind's (see
    /// [`ApiServerOptions::crds`]) when its etcd prefix is still empty.
    pub async fn start_apiserver_with(&self, options: ApiServerOptions) -> Result<ApiServer> {
        let prefix = format!("{}/{}", self.prefix, options.name);
        let etcd_url = self.etcd.url();
        // A stock server bootstraps API Priority and Fairness objects a lean one
        // does not: their storage differs.
        let mut flags = options.extra_args.clone();
        flags.push(format!("all-beta-apis={}", options.all_beta_apis));
        let key = snapshot::template_key(etcd_url, &flags, &options.crds)?;
        let template = match snapshot::template_for(&key) {
            Some(template) if snapshot::is_empty(etcd_url, &prefix).await? => {
                snapshot::copy_prefix(etcd_url, &template, &prefix).await?;
                Some(template)
            }
            _ => None,
        };
        let server = self.spawn_apiserver(&options, &prefix).await?;
        if template.is_some() {
            server.wait_established(crd_names(&options.crds)).await?;
        } else {
            if !options.crds.is_empty() {
                server.install_crds(options.crds.iter().cloned()).await?;
            }
            snapshot::save_template(etcd_url, &prefix, key).await?;
        }
        Ok(server)
    }

    async fn spawn_apiserver(&self, options: &ApiServerOptions, prefix: &str) -> Result<ApiServer> {
        let dir = self.root.path().join(&options.name);
        std::fs::create_dir_all(&dir).map_err(io_err(format!("create {}", dir.display())))?;
        // Also the names Pods use in-cluster (the `kubernetes` Service's ClusterIP in
        // every testenv server's Service range), for a real node's relay.
        let serving = self.ca.issue(&[
            "127.0.0.1",
            "localhost",
            "10.96.0.1",
            "kubernetes",
            "kubernetes.default",
            "kubernetes.default.svc",
            "kubernetes.default.svc.cluster.local",
        ])?;
        write(&dir.join("serving.crt"), &serving.cert_pem)?;
        write(&dir.join("serving.key"), &serving.key_pem)?;
        let (sa_key, sa_pub) = signing_key_pair_pem()?;
        write(&dir.join("sa.key"), &sa_key)?;
        write(&dir.join("sa.pub"), &sa_pub)?;
        let admin = TestUser::new("admin", &["system:masters"]);
        let mut users = vec![admin.clone()];
        users.extend(options.users.iter().cloned());
        let tokens: String = users
            .iter()
            .enumerate()
            .map(|(i, u)| {
                format!(
                    "{},{},uid-{i},\"{}\"\n",
                    u.token,
                    u.name,
                    u.groups.join(",")
                )
            })
            .collect();
        write(&dir.join("tokens.csv"), &tokens)?;

        let mut last_error = None;
        // A free port can be taken between our probe and the server's bind: retry.
        for _ in 0..3 {
            let port = free_port()?;
            let mut server = ApiServer {
                name: options.name.clone(),
                dir: dir.clone(),
                port,
                binary: self.assets.kube_apiserver(),
                args: apiserver_args(&dir, port, self.etcd.url(), prefix, options),
                child: None,
                ca_pem: self.ca.cert_pem(),
                users: users.clone(),
            };
            write(&server.kubeconfig_path(), &server.kubeconfig_yaml("admin")?)?;
            match server.start().await {
                Ok(()) => return Ok(server),
                Err(Error::Exited { log_tail, .. })
                    if log_tail.contains("address already in use") =>
                {
                    last_error = Some(log_tail);
                }
                Err(err) => return Err(err),
            }
        }
        Err(Error::NotReady {
            process: format!("kube-apiserver {}", options.name),
            seconds: READY_TIMEOUT.as_secs(),
            log_tail: last_error.unwrap_or_default(),
        })
    }

    /// Starts kube-controller-manager (namespace, garbage-collector and ClusterRole
    /// aggregation controllers)
    /// against `server`, for tests that need namespace deletion or owner-reference GC.
    pub fn start_controller_manager(&self, server: &ApiServer) -> Result<ControllerManager> {
        // clusterrole-aggregation fills the aggregated `admin`, `edit` and `view`
        // ClusterRoles, so RoleBindings to them grant what they grant in a cluster.
        self.start_controller_manager_with(
            server,
            "namespace,garbagecollector,clusterrole-aggregation",
        )
    }

    /// kube-controller-manager running only `controllers` (its `--controllers`
    /// list, such as `endpoint,endpointslice`) against `server`.
    pub fn start_controller_manager_with(
        &self,
        server: &ApiServer,
        controllers: &str,
    ) -> Result<ControllerManager> {
        let binary = self.assets.kube_controller_manager()?;
        let args = vec![
            format!("--kubeconfig={}", server.kubeconfig_path().display()),
            "--leader-elect=false".into(),
            format!("--controllers={controllers}"),
            format!(
                "--service-account-private-key-file={}",
                server.dir.join("sa.key").display()
            ),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=0".into(),
            "--port=0".into(),
        ];
        let log = server.dir.join("kube-controller-manager.log");
        let child = ManagedChild::spawn(
            &format!("kube-controller-manager {}", server.name),
            &binary,
            &args,
            log,
        )?;
        Ok(ControllerManager { _child: child })
    }
}

async fn start_etcd(assets: &Assets, root: &Path) -> Result<Etcd> {
    let mut last = None;
    for _ in 0..3 {
        let client_port = free_port()?;
        let peer_port = free_port()?;
        let url = format!("http://127.0.0.1:{client_port}");
        let args = vec![
            format!(
                "--data-dir={}",
                root.join(format!("etcd-{client_port}")).display()
            ),
            format!("--listen-client-urls={url}"),
            format!("--advertise-client-urls={url}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-cluster=default=http://127.0.0.1:{peer_port}"),
            "--log-level=warn".into(),
        ];
        let child = ManagedChild::spawn("etcd", &assets.etcd(), &args, root.join("etcd.log"))?;
        let mut etcd = Etcd { child, url };
        match etcd.wait_healthy(client_port).await {
            Ok(()) => return Ok(etcd),
            Err(Error::Exited { log_tail, .. }) if log_tail.contains("address already in use") => {
                last = Some(log_tail)
            }
            Err(err) => return Err(err),
        }
    }
    Err(Error::NotReady {
        process: "etcd".into(),
        seconds: READY_TIMEOUT.as_secs(),
        log_tail: last.unwrap_or_default(),
    })
}

fn crd_names(crds: &[CustomResourceDefinition]) -> Vec<String> {
    crds.iter()
        .map(|crd| crd.metadata.name.clone().unwrap_or_default())
        .collect()
}

/// The etcd of every [`TestEnv::start_shared`] environment. Started on a thread of
/// its own with a runtime of its own (the caller's runtime may end with its test);
/// nothing in a running [`Etcd`] needs a runtime.
fn shared_etcd(assets: &Assets) -> Result<Arc<Etcd>> {
    static SHARED: OnceLock<Result<Arc<Etcd>, String>> = OnceLock::new();
    let start = || {
        let root = temp_root()?;
        crate::process::remove_at_exit(root.path())?;
        let root = root.keep();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(io_err("build a runtime to start the shared etcd"))?;
        runtime.block_on(start_etcd(assets, &root)).map(Arc::new)
    };
    SHARED
        .get_or_init(|| {
            std::thread::scope(|scope| {
                std::thread::Builder::new()
                    .name("testenv-shared-etcd".into())
                    .spawn_scoped(scope, || start().map_err(|e| e.to_string()))
                    .map_err(|e| format!("start a thread for the shared etcd: {e}"))?
                    .join()
                    .unwrap_or_else(|_| Err("the shared etcd's thread panicked".into()))
            })
        })
        .clone()
        .map_err(Error::SharedEtcd)
}

fn apiserver_args(
    dir: &Path,
    port: u16,
    etcd_url: &str,
    prefix: &str,
    options: &ApiServerOptions,
) -> Vec<String> {
    let d = |f: &str| dir.join(f).display().to_string();
    let mut args = vec![
        format!("--etcd-servers={etcd_url}"),
        format!("--etcd-prefix={prefix}"),
        format!("--secure-port={port}"),
        "--bind-address=127.0.0.1".into(),
        "--advertise-address=127.0.0.1".into(),
        format!("--cert-dir={}", d("certs")),
        format!("--tls-cert-file={}", d("serving.crt")),
        format!("--tls-private-key-file={}", d("serving.key")),
        format!("--token-auth-file={}", d("tokens.csv")),
        "--authorization-mode=RBAC".into(),
        "--service-account-issuer=https://kubernetes.default.svc".into(),
        format!("--service-account-key-file={}", d("sa.pub")),
        format!("--service-account-signing-key-file={}", d("sa.key")),
        "--service-cluster-ip-range=10.96.0.0/16".into(),
        "--allow-privileged=true".into(),
        "--profiling=false".into(),
        // The endpoint reconciler cannot publish a loopback address and retries its
        // write every 10s; without it an idle server writes nothing, so every write
        // a test counts is the code under test's.
        "--endpoint-reconciler-type=none".into(),
    ];
    if !options.service_account_admission {
        args.push("--disable-admission-plugins=ServiceAccount".into());
    }
    if !options.all_beta_apis {
        args.push("--enable-priority-and-fairness=false".into());
        args.push(
            "--runtime-config=api/beta=false,discovery.k8s.io/v1beta1=true,policy/v1beta1=true,extensions/v1beta1=true"
                .into(),
        );
    }
    args.extend(options.extra_args.iter().cloned());
    args
}

/// A running kube-controller-manager; stopped on drop.
pub struct ControllerManager {
    _child: ManagedChild,
}

/// One kube-apiserver.
pub struct ApiServer {
    name: String,
    dir: PathBuf,
    port: u16,
    binary: PathBuf,
    args: Vec<String>,
    child: Option<ManagedChild>,
    ca_pem: String,
    users: Vec<TestUser>,
}

impl ApiServer {
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `https://127.0.0.1:PORT`
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's directory: logs, certificates, kubeconfig.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(ManagedChild::pid)
    }

    /// The CA that signed the serving certificate.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A kubeconfig file for the admin user.
    pub fn kubeconfig_path(&self) -> PathBuf {
        self.dir.join("kubeconfig")
    }

    /// A kubeconfig for `user` (admin or one from [`ApiServerOptions::users`]).
    pub fn kubeconfig_yaml(&self, user: &str) -> Result<String> {
        let token = &self
            .users
            .iter()
            .find(|u| u.name == user)
            .ok_or_else(|| Error::Kubeconfig {
                server: self.name.clone(),
                message: format!("no user {user:?}"),
            })?
            .token;
        let ca = base64::engine::general_purpose::STANDARD.encode(&self.ca_pem);
        let (server, name) = (self.url(), &self.name);
        Ok(format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: {name}\n  cluster:\n    server: {server}\n    \
             certificate-authority-data: {ca}\nusers:\n- name: {user}\n  user:\n    token: {token}\n\
             contexts:\n- name: {name}\n  context:\n    cluster: {name}\n    user: {user}\n\
             current-context: {name}\n"
        ))
    }

    /// A client authenticated as admin (`system:masters`).
    pub async fn client(&self) -> Result<Client> {
        self.client_as("admin").await
    }

    /// A client authenticated as `user`.
    pub async fn client_as(&self, user: &str) -> Result<Client> {
        let yaml = self.kubeconfig_yaml(user)?;
        let kubeconfig_err = |message: String| Error::Kubeconfig {
            server: self.name.clone(),
            message,
        };
        let kubeconfig = Kubeconfig::from_yaml(&yaml).map_err(|e| kubeconfig_err(e.to_string()))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .map_err(|e| kubeconfig_err(e.to_string()))?;
        Client::try_from(config).map_err(|source| Error::Kube {
            server: self.name.clone(),
            source,
        })
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|c| c.exited().is_none())
    }

    /// Kills the server (as a crash would). Its data stays in etcd.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.kill();
        }
    }

    /// Starts the server again on the same port, prefix and certificates, and waits
    /// until it is ready. A no-op when it runs.
    pub async fn start(&mut self) -> Result<()> {
        if self.is_running() {
            return Ok(());
        }
        let log = self.dir.join("kube-apiserver.log");
        let child = ManagedChild::spawn(
            &format!("kube-apiserver {}", self.name),
            &self.binary,
            &self.args,
            log,
        )?;
        self.child = Some(child);
        self.wait_ready().await
    }

    /// Stops and starts the server.
    pub async fn restart(&mut self) -> Result<()> {
        self.stop();
        self.start().await
    }

    async fn wait_ready(&mut self) -> Result<()> {
        let client = self.client().await?;
        let deadline = Instant::now() + READY_TIMEOUT;
        loop {
            let Some(child) = self.child.as_mut() else {
                return Err(Error::NotReady {
                    process: format!("kube-apiserver {}", self.name),
                    seconds: 0,
                    log_tail: "stopped".into(),
                });
            };
            if let Some(status) = child.exited() {
                let err = child.exited_error(status);
                self.child = None;
                return Err(err);
            }
            let request = http::Request::get("/readyz").body(Vec::new());
            if let Ok(request) = request
                && let Ok(body) = client.request_text(request).await
                && body.trim() == "ok"
                && bootstrapped(&client).await
            {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(Error::NotReady {
                    process: child.name().to_owned(),
                    seconds: READY_TIMEOUT.as_secs(),
                    log_tail: child.log_tail(30),
                });
            }
            tokio::time::sleep(POLL).await;
        }
    }

    /// The server's own `apiserver_request_total` counters.
    pub async fn request_counts(&self) -> Result<RequestCounts> {
        Ok(parse_request_counts(&self.metrics_text().await?))
    }

    /// The server's `/metrics`, as Prometheus text.
    pub async fn metrics_text(&self) -> Result<String> {
        let client = self.client().await?;
        let request = http::Request::get("/metrics")
            .body(Vec::new())
            .map_err(|e| Error::Kubeconfig {
                server: self.name.clone(),
                message: e.to_string(),
            })?;
        let text = client
            .request_text(request)
            .await
            .map_err(|source| Error::Kube {
                server: self.name.clone(),
                source,
            })?;
        Ok(text)
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self, lines: usize) -> String {
        crate::process::log_tail(&self.dir.join("kube-apiserver.log"), lines)
    }
}

/// A loopback port nothing listens on now (for a process a test starts).
pub fn free_port() -> Result<u16> {
    let listener =
        TcpListener::bind(("127.0.0.1", 0)).map_err(io_err("find a free loopback port"))?;
    let port = listener
        .local_addr()
        .map_err(io_err("read a bound port"))?
        .port();
    Ok(port)
}

fn write(path: &Path, contents: &str) -> Result<()> {
    std::fs::write(path, contents).map_err(io_err(format!("write {}", path.display())))
}

/// Objects the API server creates for itself after it reports ready (the system
/// namespaces and the `kubernetes` Service). Waiting for them keeps the server's own
/// startup writes out of every test that counts writes.
const BOOTSTRAP_OBJECTS: [&str; 5] = [
    "/api/v1/namespaces/default",
    "/api/v1/namespaces/kube-system",
    "/api/v1/namespaces/kube-public",
    "/api/v1/namespaces/kube-node-lease",
    "/api/v1/namespaces/default/services/kubernetes",
];

async fn bootstrapped(client: &Client) -> bool {
    for path in BOOTSTRAP_OBJECTS {
        let Ok(request) = http::Request::get(path).body(Vec::new()) else {
            return false;
        };
        if client.request_text(request).await.is_err() {
            return false;
        }
    }
    true
}
