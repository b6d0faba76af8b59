//! Real Kubernetes control-plane processes for tests and the local playground.
//!
//! [`TestEnv::start`] starts one etcd; [`TestEnv::start_shared`] uses the one etcd of
//! the whole process (a test binary), starting it first if need be;
//! [`TestEnv::start_apiserver`] starts any number of `kube-apiserver`s on it, each
//! with its own `--etcd-prefix`, free loopback port, certificates and token users,
//! and waits for `/readyz` (a server after the first of its kind starts on a copy of
//! that one's storage, CRDs included: see [`ApiServerOptions::crds`]). Every process is killed
//! when its handle drops (also while a test panics), and, through
//! `PR_SET_PDEATHSIG`, when the test process dies without unwinding. An environment
//! kept in a `static` for a whole test binary never drops: its directory goes with
//! [`TestEnv::remove_dir_at_exit`].
//!
//! Binaries come from `KUBEBUILDER_ASSETS` (the envtest convention) or from the cache
//! `scripts/test-apiserver.sh` builds; see [`Assets::locate`].

mod assets;
mod certs;
mod crds;
mod kubectl;
mod metrics;
pub mod node;
mod objects;
pub mod poll;
mod pool;
mod process;
mod server;
mod snapshot;
pub mod test_kubelet;
mod tls_probe;

pub use assets::Assets;
pub use certs::{CertError, IssuedCert, TestCa};
pub use crds::gadget_crd;
pub use kubectl::kubectl;
pub use metrics::{RequestCounts, WRITE_VERBS, parse_request_counts};
pub use node::RealNode;
pub use objects::{CreateError, create_from_json};
pub use poll::{eventually, http_get, until_refused};
pub use pool::{PooledServer, ServerPool};
pub use server::{
    ApiServer, ApiServerOptions, ControllerManager, Etcd, TestEnv, TestUser, free_port,
};
pub use test_kubelet::{RecordedRequest, TestKubelet, TestKubeletOptions};
pub use tls_probe::tls_handshake;

/// Everything that can go wrong starting or talking to the test control plane.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "no test API server binaries: {0}. Run scripts/test-apiserver.sh (it builds them once) \
         or set KUBEBUILDER_ASSETS to a directory holding etcd and kube-apiserver"
    )]
    NoAssets(String),
    #[error("could not {action}: {source}")]
    Io {
        action: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{process} exited before it was ready ({status}); last log lines:\n{log_tail}")]
    Exited {
        process: String,
        status: String,
        log_tail: String,
    },
    #[error("{process} was not ready within {seconds}s; last log lines:\n{log_tail}")]
    NotReady {
        process: String,
        seconds: u64,
        log_tail: String,
    },
    #[error(transparent)]
    Cert(#[from] CertError),
    #[error("CRD {name} was not Established within {seconds}s")]
    CrdNotEstablished { name: String, seconds: u64 },
    #[error("test kubelet: {0}")]
    TestKubelet(String),
    #[error("real node: {0}")]
    Node(String),
    #[error("etcd: {0}")]
    Etcd(String),
    #[error("the shared etcd did not start: {0}")]
    SharedEtcd(String),
    #[error("local image: {0}")]
    Image(String),
    #[error("{server} could not be reset for another test: {message}")]
    Reset { server: String, message: String },
    #[error("kubeconfig for {server}: {message}")]
    Kubeconfig { server: String, message: String },
    #[error("request to {server} failed: {source}")]
    Kube {
        server: String,
        #[source]
        source: kube::Error,
    },
}

pub type Result<T, E = Error> = std::result::Result<T, E>;

pub(crate) fn io_err(action: impl Into<String>) -> impl FnOnce(std::io::Error) -> Error {
    let action = action.into();
    move |source| Error::Io { action, source }
}
