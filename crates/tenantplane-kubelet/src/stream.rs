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
use kube::api::AttachParams;
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
pub(crate) fn percent_decode(text: &str) -> Option<String> {
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
    crate::server::status_response(StatusCode::BAD_REQUEST, "BadRequest", message)
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
        max_stdin_buf_size: None,
        max_stdout_buf_size: None,
        max_stderr_buf_size: None,
    };
    // The host side is relayed frame by frame (not through kube's AttachedProcess):
    // kube's client ends the whole exec when stdin ends on a host that speaks only
    // v4 (a 1.20 kubelet), losing the output still to come; relaying lets a v5
    // caller's stdin close reach a v5 host and is simply not forwarded to a v4 one.
    let url = pods.resource_url().to_owned();
    let client = pods.into_client();
    let host_request = match kind {
        StreamKind::Exec => {
            kube::core::Request::new(url).exec(&host_name, options.command.clone(), &params)
        }
        StreamKind::Attach => kube::core::Request::new(url).attach(&host_name, &params),
    };
    let mut host_request = match host_request {
        Ok(r) => r,
        Err(err) => return bad_request(format!("cannot build the host {}: {err}", kind.as_str())),
    };
    host_request.extensions_mut().insert(kind.as_str());
    let connection = match client.connect(host_request).await {
        Ok(c) => c,
        Err(kube::Error::Api(status)) => {
            let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::BAD_GATEWAY);
            return crate::server::status_response(code, &status.reason, status.message);
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
                return;
            }
        };
        let ws = WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
        tracing::info!(%tenant, pod = %host_name, kind = kind.as_str(), protocol, "kubelet stream started");
        let host_closes_streams = connection.supports_stream_close();
        relay(
            ws,
            connection.into_stream(),
            protocol == PROTOCOLS[0],
            host_closes_streams,
        )
        .await;
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

/// What to do with one frame from the caller.
#[derive(Debug, PartialEq, Eq)]
pub enum Forward {
    /// Send it to the host as it is.
    Send,
    /// Drop it: the host cannot take it (stdin close on a v4 host, or a frame of
    /// an unknown channel).
    Drop,
}

/// Decides a caller frame's fate: stdin and resize cross; a v5 stream close crosses
/// when both sides speak v5; nothing else does (status is the host's to send).
pub fn forward_from_caller(frame: &[u8], caller_closes: bool, host_closes: bool) -> Forward {
    match frame.split_first() {
        Some((&STDIN | &RESIZE, _)) => Forward::Send,
        Some((&CLOSE, rest)) if caller_closes && host_closes && rest.first() == Some(&STDIN) => {
            Forward::Send
        }
        _ => Forward::Drop,
    }
}

/// Whether a host frame crosses to the caller: output and status (a stream close
/// only to a v5 caller).
pub fn forward_from_host(frame: &[u8], caller_closes: bool) -> bool {
    match frame.first() {
        Some(&STDOUT | &STDERR | &STATUS) => true,
        Some(&CLOSE) => caller_closes,
        _ => false,
    }
}

/// Relays frames both ways until the host ends the stream (after its status) or
/// the caller goes; then closes the caller's side normally (1000: kubectl reads a
/// close without a code as an error).
async fn relay<C, H>(
    caller: WebSocketStream<C>,
    host: WebSocketStream<H>,
    caller_closes: bool,
    host_closes: bool,
) where
    C: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
    H: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut caller_tx, mut caller_rx) = caller.split();
    let (mut host_tx, mut host_rx) = host.split();
    let down = async {
        while let Some(message) = host_rx.next().await {
            match message {
                Ok(Message::Binary(data)) => {
                    if forward_from_host(&data, caller_closes)
                        && caller_tx.send(Message::Binary(data)).await.is_err()
                    {
                        return;
                    }
                }
                Ok(Message::Close(_)) | Err(_) => return,
                Ok(_) => {}
            }
        }
    };
    let up = async {
        while let Some(message) = caller_rx.next().await {
            match message {
                Ok(Message::Binary(data)) => {
                    if forward_from_caller(&data, caller_closes, host_closes) == Forward::Send
                        && host_tx.send(Message::Binary(data)).await.is_err()
                    {
                        return;
                    }
                }
                Ok(Message::Close(frame)) => {
                    tracing::debug!(?frame, "the caller closed the stream");
                    return;
                }
                Err(err) => {
                    tracing::debug!(error = %err, "reading from the caller failed");
                    return;
                }
                Ok(_) => {}
            }
        }
    };
    // The host ending the stream ends the session; the caller leaving ends it too.
    tokio::select! {
        () = down => {}
        () = up => {}
    }
    let _ = host_tx.close().await;
    let close = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    let _ = caller_tx.send(Message::Close(Some(close))).await;
    let _ = caller_tx.close().await;
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn frames_cross_by_channel_and_stdin_close_only_between_v5_sides() {
        // From the caller: stdin and resize always; stdin close only v5 to v5.
        assert_eq!(
            forward_from_caller(&[STDIN, b'x'], true, false),
            Forward::Send
        );
        assert_eq!(
            forward_from_caller(&[RESIZE, b'{'], false, false),
            Forward::Send
        );
        assert_eq!(
            forward_from_caller(&[CLOSE, STDIN], true, true),
            Forward::Send
        );
        assert_eq!(
            forward_from_caller(&[CLOSE, STDIN], true, false),
            Forward::Drop,
            "a v4 host would end the exec"
        );
        assert_eq!(
            forward_from_caller(&[CLOSE, STDIN], false, true),
            Forward::Drop
        );
        // A caller cannot forge output or a status, nor send empty frames.
        for forged in [
            &[STDOUT, b'x'][..],
            &[STDERR][..],
            &[STATUS, b'{'][..],
            &[][..],
            &[9][..],
        ] {
            assert_eq!(
                forward_from_caller(forged, true, true),
                Forward::Drop,
                "{forged:?}"
            );
        }
        // From the host: output, status; a close only to a v5 caller; no stdin echo.
        assert!(forward_from_host(&[STDOUT, b'x'], false));
        assert!(forward_from_host(&[STATUS, b'{'], false));
        assert!(forward_from_host(&[CLOSE, STDOUT], true));
        assert!(!forward_from_host(&[CLOSE, STDOUT], false));
        assert!(!forward_from_host(&[STDIN, b'x'], true));
        assert!(!forward_from_host(&[], true));
    }

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
}
