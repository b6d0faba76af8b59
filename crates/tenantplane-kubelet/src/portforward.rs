//! port-forward: kubectl's SPDY/3.1 session (`X-Stream-Protocol-Version:
//! portforward.k8s.io`), bridged to `pods/portforward` of the host Pod on the
//! HOST API server with kube's own client.
//!
//! Per forwarded connection kubectl opens two streams carrying the same
//! `requestid` and `port` headers: `streamtype: error` (half-closed by the client)
//! then `streamtype: data`. Each stream gets a SYN_REPLY; once both of a request
//! are open, one host port-forward carries the data stream's bytes both ways. A
//! failure is written on the error stream; both streams are FINed when the pod
//! side ends. The same session also runs tunnelled in WebSocket binary messages
//! (subprotocol `SPDY/3.1+portforward.k8s.io`, what kubectl 1.31+ tries first).
//!
//! Stays over 500 lines: one SPDY session loop and its stream bookkeeping;
//! splitting it would scatter the session's invariants.

use std::collections::{BTreeSet, HashMap};
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use hyper_util::rt::TokioIo;
use k8s_openapi::api::core::v1::Pod;
use kube::Api;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::Role;

use crate::spdy::{self, Decoder, Encoder, FLAG_FIN, Frame};

pub const PROTOCOL: &str = "portforward.k8s.io";
pub const SPDY: &str = "SPDY/3.1";
/// SPDY tunnelled in WebSocket binary messages (what kubectl 1.31+ tries first).
pub const TUNNEL: &str = "SPDY/3.1+portforward.k8s.io";
const CHUNK: usize = 32 * 1024;
/// Data frames buffered per stream before its host port-forward has started.
const PENDING: usize = 64;
/// Forwarded connections open at once on one SPDY connection (each holds two
/// streams); more are refused (RST_STREAM REFUSED_STREAM).
pub const MAX_REQUESTS: usize = 256;
/// How long the host's error message is waited for once the pod side ended.
const ERROR_GRACE: Duration = Duration::from_secs(2);

fn bad_request(message: String) -> Response {
    crate::server::status_response(StatusCode::BAD_REQUEST, "BadRequest", message)
}

/// The ports the query allows (`port=`/`ports=`, repeated or comma separated);
/// `None` when it names none (SPDY: the ports come in stream headers).
pub fn allowed_ports(query: &str) -> Result<Option<BTreeSet<u16>>, String> {
    let mut ports = BTreeSet::new();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "port" && key != "ports" {
            continue;
        }
        for value in value.split("%2C").flat_map(|v| v.split(',')) {
            ports.insert(parse_port(value)?);
        }
    }
    Ok((!ports.is_empty()).then_some(ports))
}

/// A port number 1..=65535.
pub fn parse_port(text: &str) -> Result<u16, String> {
    match text.trim().parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(format!("invalid port {text:?}")),
    }
}

fn header_has(headers: &HeaderMap, name: header::HeaderName, wanted: &str) -> bool {
    headers
        .get_all(name)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|v| v.trim().eq_ignore_ascii_case(wanted))
}

/// Answers the SPDY upgrade and serves the session in the background.
pub fn upgrade(
    mut request: Request,
    pods: Api<Pod>,
    host_name: String,
    tenant: String,
    allowed: Option<BTreeSet<u16>>,
) -> Response {
    let headers = request.headers();
    if header_has(headers, header::UPGRADE, "websocket") {
        if !header_has(headers, header::SEC_WEBSOCKET_PROTOCOL, TUNNEL) {
            return bad_request(format!(
                "port-forward over WebSocket is served only as the {TUNNEL} tunnel"
            ));
        }
        let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
            return bad_request("the WebSocket upgrade has no Sec-WebSocket-Key".to_owned());
        };
        let accept = derive_accept_key(key.as_bytes());
        let on_upgrade = hyper::upgrade::on(&mut request);
        tokio::spawn(async move {
            let upgraded = match on_upgrade.await {
                Ok(u) => u,
                Err(err) => {
                    tracing::debug!(error = %err, "the WebSocket upgrade did not complete");
                    return;
                }
            };
            let ws =
                WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None).await;
            tracing::info!(%tenant, pod = %host_name, protocol = TUNNEL, "kubelet port-forward started");
            tunnel(ws, pods, host_name.clone(), allowed).await;
            tracing::info!(%tenant, pod = %host_name, "kubelet port-forward ended");
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
            HeaderValue::from_static(TUNNEL),
        );
        return response;
    }
    if !header_has(headers, header::UPGRADE, SPDY) {
        return bad_request(format!("port-forward needs an upgrade to {SPDY}"));
    }
    let version = header::HeaderName::from_static("x-stream-protocol-version");
    if !header_has(headers, version.clone(), PROTOCOL) {
        return bad_request(format!(
            "none of the offered stream protocols is served (served: {PROTOCOL})"
        ));
    }
    let on_upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let upgraded = match on_upgrade.await {
            Ok(u) => u,
            Err(err) => {
                tracing::debug!(error = %err, "the SPDY upgrade did not complete");
                return;
            }
        };
        tracing::info!(%tenant, pod = %host_name, protocol = SPDY, "kubelet port-forward started");
        let (reader, writer) = tokio::io::split(TokioIo::new(upgraded));
        session(reader, writer, pods, host_name.clone(), allowed).await;
        tracing::info!(%tenant, pod = %host_name, "kubelet port-forward ended");
    });
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let h = response.headers_mut();
    h.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    h.insert(header::UPGRADE, HeaderValue::from_static(SPDY));
    h.insert(version, HeaderValue::from_static(PROTOCOL));
    response
}

/// The WebSocket tunnel: each binary message carries SPDY bytes, both ways; the
/// same session runs over a pipe.
async fn tunnel<S>(
    ws: WebSocketStream<S>,
    pods: Api<Pod>,
    host_name: String,
    allowed: Option<BTreeSet<u16>>,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let (ours, theirs) = tokio::io::duplex(4 * CHUNK);
    let (session_reader, session_writer) = tokio::io::split(theirs);
    let (mut pipe_read, mut pipe_write) = tokio::io::split(ours);
    let (mut ws_tx, mut ws_rx) = ws.split();
    let incoming = async move {
        while let Some(Ok(message)) = ws_rx.next().await {
            match message {
                Message::Binary(data) if pipe_write.write_all(&data).await.is_err() => break,
                Message::Close(_) => break,
                _ => {}
            }
        }
        // The session reads EOF: the client is gone.
        let _ = pipe_write.shutdown().await;
    };
    let outgoing = async move {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match pipe_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    if ws_tx
                        .send(Message::binary(buf[..n].to_vec()))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }
        }
        let _ = ws_tx.send(Message::Close(None)).await;
        let _ = ws_tx.close().await;
    };
    let pumps = tokio::spawn(async move {
        tokio::join!(incoming, outgoing);
    });
    session(session_reader, session_writer, pods, host_name, allowed).await;
    let _ = pumps.await;
}

/// What the session writes; encoded in order by the one writer (header blocks
/// share one zlib stream).
#[derive(Debug)]
enum Out {
    Reply(u32),
    Data {
        stream_id: u32,
        fin: bool,
        data: Vec<u8>,
    },
    Rst(u32, u32),
    Ping(u32),
    GoAway(u32, u32),
}

async fn write_frames(mut writer: impl AsyncWrite + Unpin, mut rx: mpsc::Receiver<Out>) {
    let mut encoder = Encoder::new();
    while let Some(out) = rx.recv().await {
        let bytes = match out {
            Out::Reply(id) => encoder.syn_reply(id, 0, &[]),
            Out::Data {
                stream_id,
                fin,
                data,
            } => Encoder::data(stream_id, if fin { FLAG_FIN } else { 0 }, &data),
            Out::Rst(id, status) => Encoder::rst_stream(id, status),
            Out::Ping(id) => Encoder::ping(id),
            Out::GoAway(last, status) => Encoder::goaway(last, status),
        };
        if writer.write_all(&bytes).await.is_err() || writer.flush().await.is_err() {
            return;
        }
    }
    let _ = writer.shutdown().await;
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum StreamType {
    Error,
    Data,
}

/// The streams of one forwarded connection.
#[derive(Default)]
struct Pending {
    /// The port the streams name (an error when one names none, a bad one, or
    /// they differ).
    port: Option<Result<u16, String>>,
    error: Option<u32>,
    data: Option<u32>,
    /// Bytes from the client for the data stream (`None` once it is FINed).
    to_pod: Option<mpsc::Sender<Vec<u8>>>,
    from_client: Option<mpsc::Receiver<Vec<u8>>>,
    started: Option<tokio::task::AbortHandle>,
}

/// One SPDY connection, until the client goes away or breaks the protocol.
pub async fn session<R, W>(
    mut reader: R,
    writer: W,
    pods: Api<Pod>,
    host_name: String,
    allowed: Option<BTreeSet<u16>>,
) where
    R: AsyncRead + Unpin,
    W: AsyncWrite + Unpin + Send + 'static,
{
    let (out, out_rx) = mpsc::channel::<Out>(64);
    let writer = tokio::spawn(write_frames(writer, out_rx));
    let mut decoder = Decoder::new();
    let mut requests: HashMap<String, Pending> = HashMap::new();
    // Stream id -> the request it belongs to.
    let mut streams: HashMap<u32, (String, StreamType)> = HashMap::new();
    let mut last_stream_id = 0u32;
    let mut forwards: JoinSet<String> = JoinSet::new();
    let mut buf = vec![0u8; CHUNK];
    'read: loop {
        let n = tokio::select! {
            read = reader.read(&mut buf) => match read {
                Ok(0) => {
                    tracing::debug!("port-forward: the client closed the connection");
                    break 'read;
                }
                Err(err) => {
                    tracing::debug!(error = %err, "port-forward: reading from the client failed");
                    break 'read;
                }
                Ok(n) => n,
            },
            Some(done) = forwards.join_next(), if !forwards.is_empty() => {
                // A finished forward: forget its streams.
                if let Ok(request_id) = done
                    && let Some(entry) = requests.remove(&request_id)
                {
                    for id in [entry.error, entry.data].into_iter().flatten() {
                        streams.remove(&id);
                    }
                }
                continue;
            }
        };
        decoder.feed(&buf[..n]);
        loop {
            let frame = match decoder.next_frame() {
                Ok(Some(frame)) => frame,
                Ok(None) => break,
                Err(err) => {
                    tracing::info!(error = %err, "port-forward: the client broke the SPDY protocol");
                    let _ = out
                        .send(Out::GoAway(last_stream_id, spdy::GOAWAY_PROTOCOL_ERROR))
                        .await;
                    break 'read;
                }
            };
            tracing::trace!(?frame, "port-forward: frame");
            match frame {
                Frame::SynStream {
                    stream_id,
                    flags,
                    headers,
                    ..
                } => {
                    // Client streams are odd and increasing.
                    if stream_id == 0 || stream_id % 2 == 0 || stream_id <= last_stream_id {
                        let _ = out
                            .send(Out::Rst(stream_id, spdy::RST_PROTOCOL_ERROR))
                            .await;
                        continue;
                    }
                    last_stream_id = stream_id;
                    let kind = match spdy::header(&headers, "streamtype") {
                        Some("error") => StreamType::Error,
                        Some("data") => StreamType::Data,
                        _ => {
                            let _ = out
                                .send(Out::Rst(stream_id, spdy::RST_PROTOCOL_ERROR))
                                .await;
                            continue;
                        }
                    };
                    let port = match spdy::header(&headers, "port") {
                        Some(text) => parse_port(text),
                        None => Err("the stream names no port".to_owned()),
                    };
                    // Old clients send no request id: the data stream follows its error stream.
                    let request_id = match spdy::header(&headers, "requestid") {
                        Some(id) => id.to_owned(),
                        None => match kind {
                            StreamType::Error => stream_id.to_string(),
                            StreamType::Data => stream_id.saturating_sub(2).to_string(),
                        },
                    };
                    if requests.len() >= MAX_REQUESTS && !requests.contains_key(&request_id) {
                        let _ = out
                            .send(Out::Rst(stream_id, spdy::RST_REFUSED_STREAM))
                            .await;
                        continue;
                    }
                    let entry = requests.entry(request_id.clone()).or_default();
                    let slot = match kind {
                        StreamType::Error => &mut entry.error,
                        StreamType::Data => &mut entry.data,
                    };
                    if slot.is_some() {
                        let _ = out.send(Out::Rst(stream_id, spdy::RST_STREAM_IN_USE)).await;
                        continue;
                    }
                    *slot = Some(stream_id);
                    streams.insert(stream_id, (request_id.clone(), kind));
                    let _ = out.send(Out::Reply(stream_id)).await;
                    if kind == StreamType::Data {
                        let (tx, rx) = mpsc::channel(PENDING);
                        entry.to_pod = (flags & FLAG_FIN == 0).then_some(tx);
                        entry.from_client = Some(rx);
                    }
                    entry.port = Some(match (entry.port.take(), port) {
                        (None, port) => port,
                        (Some(Ok(a)), Ok(b)) if a == b => Ok(a),
                        (Some(Err(why)), _) | (_, Err(why)) => Err(why),
                        (Some(Ok(_)), Ok(_)) => {
                            Err("the streams of one request name different ports".to_owned())
                        }
                    });
                    // Both streams open (in either order): start the forward.
                    let (Some(error_id), Some(data_id), Some(port)) =
                        (entry.error, entry.data, entry.port.clone())
                    else {
                        continue;
                    };
                    let Some(from_client) = entry.from_client.take() else {
                        continue;
                    };
                    let port = port.and_then(|p| match &allowed {
                        Some(allowed) if !allowed.contains(&p) => {
                            Err(format!("port {p} was not requested"))
                        }
                        _ => Ok(p),
                    });
                    let ids = Ids {
                        error: error_id,
                        data: data_id,
                    };
                    let handle = match port {
                        Err(why) => {
                            tracing::info!(%why, pod = %host_name, "port-forward refused");
                            let message = format!("unable to do port forwarding: {why}");
                            let out = out.clone();
                            forwards.spawn(async move {
                                fail(out, ids, message).await;
                                request_id
                            })
                        }
                        Ok(port) => {
                            let (pods, host_name, out) =
                                (pods.clone(), host_name.clone(), out.clone());
                            forwards.spawn(async move {
                                forward(pods, host_name, port, from_client, out, ids).await;
                                request_id
                            })
                        }
                    };
                    entry.started = Some(handle);
                }
                Frame::Data {
                    stream_id,
                    flags,
                    data,
                } => {
                    let Some((request_id, kind)) = streams.get(&stream_id) else {
                        let _ = out
                            .send(Out::Rst(stream_id, spdy::RST_INVALID_STREAM))
                            .await;
                        continue;
                    };
                    if *kind != StreamType::Data {
                        continue;
                    }
                    let Some(entry) = requests.get_mut(request_id) else {
                        continue;
                    };
                    if let Some(tx) = &entry.to_pod
                        && !data.is_empty()
                    {
                        let sent = if entry.started.is_some() {
                            tx.send(data).await.is_ok()
                        } else {
                            tx.try_send(data).is_ok()
                        };
                        if !sent && entry.started.is_none() {
                            let _ = out
                                .send(Out::Rst(stream_id, spdy::RST_FLOW_CONTROL_ERROR))
                                .await;
                        }
                    }
                    if flags & FLAG_FIN != 0 {
                        // End of the client's data: the pod side sees EOF.
                        entry.to_pod = None;
                    }
                }
                Frame::RstStream { stream_id, .. } => {
                    if let Some((request_id, _)) = streams.remove(&stream_id)
                        && let Some(entry) = requests.remove(&request_id)
                    {
                        if let Some(handle) = entry.started {
                            handle.abort();
                        }
                        for id in [entry.error, entry.data].into_iter().flatten() {
                            streams.remove(&id);
                        }
                    }
                }
                Frame::Ping { id } => {
                    let _ = out.send(Out::Ping(id)).await;
                }
                Frame::GoAway { .. } => break 'read,
                Frame::SynReply { stream_id, .. } | Frame::Headers { stream_id, .. } => {
                    if !streams.contains_key(&stream_id) {
                        let _ = out
                            .send(Out::Rst(stream_id, spdy::RST_INVALID_STREAM))
                            .await;
                    }
                }
                Frame::Settings | Frame::WindowUpdate { .. } | Frame::Unknown { .. } => {}
            }
        }
    }
    forwards.shutdown().await;
    drop(requests);
    drop(out);
    let _ = writer.await;
}

#[derive(Clone, Copy, Debug)]
struct Ids {
    error: u32,
    data: u32,
}

/// Writes `message` on the error stream and ends both streams.
async fn fail(out: mpsc::Sender<Out>, ids: Ids, message: String) {
    let _ = out
        .send(Out::Data {
            stream_id: ids.error,
            fin: true,
            data: message.into_bytes(),
        })
        .await;
    let _ = out
        .send(Out::Data {
            stream_id: ids.data,
            fin: true,
            data: Vec::new(),
        })
        .await;
}

/// One forwarded connection: the client's data stream to the host Pod's port
/// and back.
async fn forward(
    pods: Api<Pod>,
    host_name: String,
    port: u16,
    mut from_client: mpsc::Receiver<Vec<u8>>,
    out: mpsc::Sender<Out>,
    ids: Ids,
) {
    let mut forwarder = match pods.portforward(&host_name, &[port]).await {
        Ok(f) => f,
        Err(err) => {
            tracing::info!(error = %err, pod = %host_name, port, "port-forward: the host refused");
            let message = match err {
                kube::Error::Api(status) => status.message,
                other => other.to_string(),
            };
            fail(out, ids, format!("unable to do port forwarding: {message}")).await;
            return;
        }
    };
    let (Some(stream), Some(error)) = (forwarder.take_stream(port), forwarder.take_error(port))
    else {
        forwarder.abort();
        fail(
            out,
            ids,
            "unable to do port forwarding: no stream for the port".to_owned(),
        )
        .await;
        return;
    };
    let (mut pod_read, mut pod_write) = tokio::io::split(stream);
    let upstream = async {
        while let Some(chunk) = from_client.recv().await {
            if pod_write.write_all(&chunk).await.is_err() {
                return;
            }
        }
        let _ = pod_write.shutdown().await;
    };
    let downstream = async {
        let mut buf = vec![0u8; CHUNK];
        loop {
            match pod_read.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    let frame = Out::Data {
                        stream_id: ids.data,
                        fin: false,
                        data: buf[..n].to_vec(),
                    };
                    if out.send(frame).await.is_err() {
                        break;
                    }
                }
            }
        }
    };
    tokio::pin!(upstream, downstream);
    tokio::select! {
        () = &mut downstream => {}
        () = &mut upstream => downstream.await,
    }
    let message = tokio::time::timeout(ERROR_GRACE, error)
        .await
        .ok()
        .flatten();
    let _ = out
        .send(Out::Data {
            stream_id: ids.data,
            fin: true,
            data: Vec::new(),
        })
        .await;
    let _ = out
        .send(Out::Data {
            stream_id: ids.error,
            fin: true,
            data: message.map(String::into_bytes).unwrap_or_default(),
        })
        .await;
    forwarder.abort();
}

#[cfg(test)]
#[path = "portforward_tests.rs"]
mod tests;
