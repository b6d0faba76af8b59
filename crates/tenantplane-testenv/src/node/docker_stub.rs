//! An answer to the kubelet's cAdvisor, which asks a Docker daemon for its root
//! directory at every start and, with none to ask, retries five times a second
//! apart (cAdvisor's `docker.RootDir`): 5 s of every node start. This socket answers
//! every request with the same small document: a root directory (the one cAdvisor
//! falls back to anyway) and version 0.0.0, which cAdvisor refuses, so it registers
//! no Docker container handler and the node works as without a daemon.

use std::path::{Path, PathBuf};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::UnixListener;
use tokio::task::JoinHandle;

use crate::{Result, io_err};

const BODY: &str = r#"{"DockerRootDir":"/var/lib/docker","ServerVersion":"0.0.0","Version":"0.0.0","ApiVersion":"1.40"}"#;
/// A request head larger than this is not one of cAdvisor's.
const MAX_REQUEST: usize = 16 * 1024;

/// A running stub; stops when dropped.
pub(super) struct DockerStub {
    task: JoinHandle<()>,
    path: PathBuf,
}

impl DockerStub {
    /// The endpoint for the kubelet's `--docker` flag.
    pub(super) fn endpoint(&self) -> String {
        format!("unix://{}", self.path.display())
    }
}

impl Drop for DockerStub {
    fn drop(&mut self) {
        self.task.abort();
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Listens on `path` (a Unix socket) until dropped.
pub(super) fn start(path: &Path) -> Result<DockerStub> {
    let listener =
        UnixListener::bind(path).map_err(io_err(format!("listen on {}", path.display())))?;
    let task = tokio::spawn(async move {
        loop {
            match listener.accept().await {
                Ok((stream, _)) => {
                    tokio::spawn(answer(stream));
                }
                Err(err) => {
                    tracing::warn!(error = %err, "docker stub accept failed");
                    return;
                }
            }
        }
    });
    Ok(DockerStub {
        task,
        path: path.to_path_buf(),
    })
}

/// Reads one request head and answers it; the client's next request opens a new
/// connection (`Connection: close`).
async fn answer(mut stream: tokio::net::UnixStream) {
    let mut head = Vec::new();
    let mut buf = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") && head.len() < MAX_REQUEST {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&buf[..n]),
        }
    }
    let response = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{BODY}",
        BODY.len()
    );
    let _ = stream.write_all(response.as_bytes()).await;
    let _ = stream.shutdown().await;
}
