//! exec and attach: the WebSocket the tenant API server forwards from kubectl
//! (`v5.channel.k8s.io`, `v4.channel.k8s.io` or `channel.k8s.io`: each binary
//! frame is one channel byte and its payload; 0 stdin, 1 stdout, 2 stderr,
//! 3 status, 4 resize, 255 close a stream (v5)), bridged to `pods/exec` or
//! `pods/attach` of the host Pod on the HOST API server with kube's own client.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use kube::api::{AttachParams, AttachedProcess, TerminalSize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;
use tokio_tungstenite::tungstenite::protocol::frame::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

use crate::authz::PodTarget;

/// The channel protocols served, best first.
pub const PROTOCOLS: [&str; 3] = ["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"];

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STDERR: u8 = 2;
const STATUS: u8 = 3;
const RESIZE: u8 = 4;
const CLOSE: u8 = 255;
const CHUNK: usize = 32 * 1024;
/// How much of each stream kube's client buffers before it waits for us.
const BUFFER: usize = 64 * 1024;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StreamKind {
    Exec,
    Attach,
}

impl StreamKind {
    pub fn as_str(self) -> &'static str {
        match self {
            StreamKind::Exec => "exec",
            StreamKind::Attach => "attach",
        }
    }
}

/// The query of an exec or attach call. The API server sends `input`, `output`,
/// `error` and `tty` (`=1`) and repeated `command`; the kubelet also reads
/// `stdin`, `stdout` and `stderr`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct StreamOptions {
    pub command: Vec<String>,
    pub stdin: bool,
    pub stdout: bool,
    pub stderr: bool,
    pub tty: bool,
}

impl StreamOptions {
    pub fn from_query(query: &str) -> Result<Self, String> {
        let mut options = StreamOptions::default();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            let value = percent_decode(value)
                .ok_or_else(|| format!("the query parameter {key:?} is not valid UTF-8"))?;
            let on = matches!(value.as_str(), "1" | "true" | "True" | "TRUE");
            match key {
                "command" => options.command.push(value),
                "input" | "stdin" => options.stdin |= on,
                "output" | "stdout" => options.stdout |= on,
                "error" | "stderr" => options.stderr |= on,
                "tty" => options.tty |= on,
                _ => {}
            }
        }
        if !(options.stdin || options.stdout || options.stderr) {
            return Err("at least one of stdin, stdout and stderr must be requested".to_owned());
        }
        Ok(options)
    }
}

/// Decodes `%XX` escapes and `+` (a space in a query).
fn percent_decode(text: &str) -> Option<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'%' => {
                let hex = text.get(i + 1..i + 3)?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            }
            b'+' => {
                out.push(b' ');
                i += 1;
            }
            b => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// The subprotocol to answer with: the first of ours the caller offers.
pub fn choose_protocol(headers: &HeaderMap) -> Option<&'static str> {
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .collect();
    PROTOCOLS
        .into_iter()
        .find(|ours| offered.iter().any(|o| o == ours))
}

fn bad_request(message: String) -> Response {
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": message, "reason": "BadRequest", "code": 400,
    });
    (StatusCode::BAD_REQUEST, body.to_string()).into_response()
}

/// Answers the WebSocket upgrade, starts the host exec or attach, and bridges them.
pub async fn upgrade(
    mut request: Request,
    pods: Api<Pod>,
    host_name: String,
    target: PodTarget,
    kind: StreamKind,
    options: StreamOptions,
) -> Response {
    let headers = request.headers();
    let is_websocket = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.eq_ignore_ascii_case("websocket"));
    if !is_websocket {
        return bad_request(format!(
            "{} needs a WebSocket upgrade ({}); SPDY is not supported by tenantplane's kubelet endpoint",
            kind.as_str(),
            PROTOCOLS.join(", ")
        ));
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return bad_request("the WebSocket upgrade has no Sec-WebSocket-Key".to_owned());
    };
    let accept = derive_accept_key(key.as_bytes());
    let Some(protocol) = choose_protocol(headers) else {
        return bad_request(format!(
            "none of the offered WebSocket subprotocols is served (served: {})",
            PROTOCOLS.join(", ")
        ));
    };
    let params = AttachParams {
        container: target.container.clone(),
        stdin: options.stdin,
        stdout: options.stdout,
        stderr: options.stderr && !options.tty,
        tty: options.tty,
        max_stdin_buf_size: Some(BUFFER),
        max_stdout_buf_size: Some(BUFFER),
        max_stderr_buf_size: Some(BUFFER),
    };
    let process = match kind {
        StreamKind::Exec => {
            pods.exec(&host_name, options.command.clone(), &params)
                .await
        }
        StreamKind::Attach => pods.attach(&host_name, &params).await,
    };
    let process = match process {
        Ok(p) => p,
        Err(kube::Error::Api(status)) => {
            let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::BAD_GATEWAY);
            let body = serde_json::json!({
                "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": status.message, "reason": status.reason, "code": code.as_u16(),
            });
            return (code, body.to_string()).into_response();
        }
        Err(err) => {
            tracing::warn!(error = %err, pod = %host_name, "kubelet endpoint: host {} failed", kind.as_str());
            return (
                StatusCode::BAD_GATEWAY,
                format!("the host API server refused the {}: {err}", kind.as_str()),
            )
                .into_response();
        }
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    let tenant = target.tenant_cluster.to_string();
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(err) => {
                tracing::debug!(error = %err, "the WebSocket upgrade did not complete");
                process.abort();
                return;
            }
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        tracing::info!(%tenant, pod = %host_name, kind = kind.as_str(), protocol, "kubelet stream started");
        bridge(ws, process, protocol == PROTOCOLS[0]).await;
        tracing::info!(%tenant, pod = %host_name, kind = kind.as_str(), "kubelet stream ended");
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = response.headers_mut();
    h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    if let Ok(accept) = HeaderValue::from_str(&accept) {
        h.insert(header::SEC_WEBSOCKET_ACCEPT, accept);
    }
    h.insert(
        header::SEC_WEBSOCKET_PROTOCOL,
        HeaderValue::from_static(protocol),
    );
    response
}

fn frame(channel: u8, payload: &[u8]) -> Message {
    let mut data = Vec::with_capacity(payload.len() + 1);
    data.push(channel);
    data.extend_from_slice(payload);
    Message::binary(data)
}

async fn pump(channel: u8, mut reader: impl AsyncRead + Unpin, out: mpsc::Sender<Message>) {
    let mut buf = vec![0u8; CHUNK];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                if out.send(frame(channel, &buf[..n])).await.is_err() {
                    break;
                }
            }
        }
    }
}

/// Runs until the host process ends (its status is passed on) or the caller goes.
async fn bridge<S>(ws: WebSocketStream<S>, mut process: AttachedProcess, stream_close: bool)
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut ws_tx, mut ws_rx) = ws.split();
    let (out_tx, mut out_rx) = mpsc::channel::<Message>(16);
    let writer = tokio::spawn(async move {
        while let Some(message) = out_rx.recv().await {
            if ws_tx.send(message).await.is_err() {
                return;
            }
        }
        // A normal closure (1000): kubectl reads a close without a code as an error.
        let close = CloseFrame {
            code: CloseCode::Normal,
            reason: "".into(),
        };
        let _ = ws_tx.send(Message::Close(Some(close))).await;
        let _ = ws_tx.close().await;
    });
    let mut stdin = process.stdin();
    let mut resize = process.terminal_size();
    let status = process.take_status();
    let outputs = {
        let stdout = process.stdout();
        let stderr = process.stderr();
        let out = out_tx.clone();
        async move {
            let a = async {
                if let Some(r) = stdout {
                    pump(STDOUT, r, out.clone()).await;
                }
            };
            let b = async {
                if let Some(r) = stderr {
                    pump(STDERR, r, out.clone()).await;
                }
            };
            futures::join!(a, b);
        }
    };
    let incoming = async {
        while let Some(message) = ws_rx.next().await {
            let data = match message {
                Ok(Message::Binary(data)) => data,
                Ok(Message::Close(frame)) => {
                    tracing::debug!(?frame, "the caller closed the stream");
                    break;
                }
                Err(err) => {
                    tracing::debug!(error = %err, "reading from the caller failed");
                    break;
                }
                Ok(_) => continue,
            };
            let Some((&channel, payload)) = data.split_first() else {
                continue;
            };
            match channel {
                STDIN => {
                    if let Some(w) = stdin.as_mut()
                        && w.write_all(payload).await.is_err()
                    {
                        stdin = None;
                    }
                }
                RESIZE => {
                    if let (Some(tx), Ok(size)) = (
                        resize.as_mut(),
                        serde_json::from_slice::<TerminalSize>(payload),
                    ) {
                        let _ = tx.send(size).await;
                    }
                }
                CLOSE if stream_close && payload.first() == Some(&STDIN) => {
                    // End of the caller's stdin: the host process sees EOF.
                    if let Some(mut w) = stdin.take() {
                        let _ = w.shutdown().await;
                    }
                }
                _ => {}
            }
        }
    };
    tokio::select! {
        () = outputs => {}
        () = incoming => {
            // The caller is gone: nobody is left to read the host process.
            process.abort();
            drop(out_tx);
            let _ = writer.await;
            return;
        }
    }
    let status = match status {
        Some(status) => status.await,
        None => None,
    };
    tracing::debug!(?status, "the host process ended");
    if let Some(status) = status
        && let Ok(json) = serde_json::to_vec(&status)
    {
        let _ = out_tx.send(frame(STATUS, &json)).await;
    }
    drop(out_tx);
    let _ = writer.await;
    process.abort();
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn the_api_servers_query_is_read() {
        let o = StreamOptions::from_query(
            "command=sh&command=-c&command=echo+hi%20there&input=1&output=1&error=1",
        )
        .unwrap();
        assert_eq!(o.command, vec!["sh", "-c", "echo hi there"]);
        assert!(o.stdin && o.stdout && o.stderr && !o.tty);
        let o = StreamOptions::from_query("stdout=true&tty=true&command=ls").unwrap();
        assert!(o.stdout && o.tty && !o.stdin);
        assert!(StreamOptions::from_query("command=ls").is_err());
        assert!(StreamOptions::from_query("command=%ff&output=1").is_err());
        assert!(StreamOptions::from_query("command=%f&output=1").is_err());
    }

    #[test]
    fn the_best_offered_protocol_is_chosen() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("v4.channel.k8s.io, v5.channel.k8s.io"),
        );
        assert_eq!(choose_protocol(&headers), Some("v5.channel.k8s.io"));
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("base64.channel.k8s.io"),
        );
        assert_eq!(choose_protocol(&headers), None);
        headers.insert(
            header::SEC_WEBSOCKET_PROTOCOL,
            HeaderValue::from_static("channel.k8s.io"),
        );
        assert_eq!(choose_protocol(&headers), Some("channel.k8s.io"));
    }

    #[test]
    fn frames_carry_the_channel_first() {
        assert_eq!(frame(STDOUT, b"hi").into_data().as_ref(), &[1, b'h', b'i']);
    }
}
