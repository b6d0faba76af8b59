//! `POST /run/{ns}/{pod}/{container}?cmd=...`: the kubelet's run endpoint runs a
//! command without a stream and answers with its output. Done as a
//! non-interactive `pods/exec` of the host Pod on the HOST API server, stdout and
//! stderr collected (stdout first, as the kubelet appends them).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::AttachParams;
use tokio::io::{AsyncRead, AsyncReadExt};

use crate::server::status_response;
use crate::stream::percent_decode;

/// Output kept per run: a command printing more is stopped and refused (the
/// answer is held in memory until the command ends).
pub const RUN_OUTPUT_LIMIT: usize = 4 * 1024 * 1024;

/// The command of a run call: query parameter `cmd`, split at spaces like the
/// kubelet does. `Err` is the 400 message.
pub fn run_command(query: &str) -> Result<Vec<String>, String> {
    let mut command = None;
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key == "cmd" {
            let value = percent_decode(value)
                .ok_or_else(|| "the query parameter \"cmd\" is not valid UTF-8".to_owned())?;
            command = Some(value);
        }
    }
    let argv: Vec<String> = command
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_owned)
        .collect();
    if argv.is_empty() {
        return Err("run needs a command (query parameter cmd)".to_owned());
    }
    Ok(argv)
}

/// Why the output could not be collected.
#[derive(Debug, thiserror::Error)]
enum OutputError {
    #[error("the command wrote more than {RUN_OUTPUT_LIMIT} bytes")]
    TooLarge,
    #[error("reading the command's {stream}: {source}")]
    Read {
        stream: &'static str,
        #[source]
        source: std::io::Error,
    },
}

/// Reads stdout and stderr together to their ends (one alone could stall the
/// command while the other's buffer is full), at most [`RUN_OUTPUT_LIMIT`] in all.
async fn collect(
    mut stdout: Option<impl AsyncRead + Unpin>,
    mut stderr: Option<impl AsyncRead + Unpin>,
) -> Result<Vec<u8>, OutputError> {
    let (mut out, mut err) = (Vec::new(), Vec::new());
    let (mut out_chunk, mut err_chunk) = ([0u8; 8192], [0u8; 8192]);
    loop {
        tokio::select! {
            read = async { Some(stdout.as_mut()?.read(&mut out_chunk).await) }, if stdout.is_some() => {
                match read {
                    Some(Ok(0)) | None => stdout = None,
                    Some(Ok(n)) => out.extend_from_slice(&out_chunk[..n]),
                    Some(Err(source)) => return Err(OutputError::Read { stream: "stdout", source }),
                }
            }
            read = async { Some(stderr.as_mut()?.read(&mut err_chunk).await) }, if stderr.is_some() => {
                match read {
                    Some(Ok(0)) | None => stderr = None,
                    Some(Ok(n)) => err.extend_from_slice(&err_chunk[..n]),
                    Some(Err(source)) => return Err(OutputError::Read { stream: "stderr", source }),
                }
            }
            else => break,
        }
        if out.len() + err.len() > RUN_OUTPUT_LIMIT {
            return Err(OutputError::TooLarge);
        }
    }
    out.extend_from_slice(&err);
    Ok(out)
}

/// Runs `command` in `container` of host Pod `host_name` and answers with its output
/// (200), or 500 with the host's status when it failed.
pub async fn run(
    pods: Api<Pod>,
    host_name: &str,
    container: &str,
    command: Vec<String>,
) -> Response {
    let params = AttachParams {
        container: Some(container.to_owned()),
        stdin: false,
        stdout: true,
        stderr: true,
        tty: false,
        ..AttachParams::default()
    };
    let mut process = match pods.exec(host_name, command, &params).await {
        Ok(p) => p,
        Err(kube::Error::Api(status)) => {
            let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::BAD_GATEWAY);
            return status_response(code, &status.reason, status.message);
        }
        Err(err) => {
            tracing::warn!(error = %err, pod = %host_name, "kubelet endpoint: host exec for run failed");
            return status_response(
                StatusCode::BAD_GATEWAY,
                "InternalError",
                "the host API server did not start the command".to_owned(),
            );
        }
    };
    let status = process.take_status();
    let output = collect(process.stdout(), process.stderr()).await;
    let output = match output {
        Ok(o) => o,
        Err(err) => {
            process.abort();
            tracing::info!(error = %err, pod = %host_name, "kubelet endpoint: run output not collected");
            return status_response(
                StatusCode::INTERNAL_SERVER_ERROR,
                "InternalError",
                err.to_string(),
            );
        }
    };
    let status = match status {
        Some(pending) => pending.await,
        None => None,
    };
    if let Some(failed) = status.filter(|s| s.status.as_deref() == Some("Failure")) {
        return status_response(
            StatusCode::INTERNAL_SERVER_ERROR,
            "InternalError",
            failed.message.unwrap_or_default(),
        );
    }
    let mut response = (StatusCode::OK, output).into_response();
    response
        .headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain"));
    response
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_command_is_split_at_spaces() {
        assert_eq!(
            run_command("cmd=echo+hello%20world").unwrap(),
            ["echo", "hello", "world"]
        );
        assert_eq!(run_command("x=1&cmd=ls++-l").unwrap(), ["ls", "-l"]);
        assert!(run_command("").is_err());
        assert!(run_command("cmd=").is_err());
        assert!(run_command("cmd=%20").is_err());
        assert!(run_command("cmd=%ff").is_err());
    }

    #[tokio::test]
    async fn stdout_then_stderr_and_no_more_than_the_limit() {
        let out = collect(Some(&b"out\n"[..]), Some(&b"err\n"[..]))
            .await
            .unwrap();
        assert_eq!(out, b"out\nerr\n");
        let none: Option<&[u8]> = None;
        assert_eq!(collect(Some(&b"x"[..]), none).await.unwrap(), b"x");
        let big = vec![b'x'; RUN_OUTPUT_LIMIT + 1];
        assert!(matches!(
            collect(Some(&big[..]), Some(&b""[..])).await,
            Err(OutputError::TooLarge)
        ));
    }
}
