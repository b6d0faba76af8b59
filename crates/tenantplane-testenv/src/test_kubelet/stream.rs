//! The test kubelet's streams: exec and attach over the Kubernetes channel
//! protocols, and port-forward, all over WebSocket.
//!
//! A channel frame is one binary WebSocket message: one byte channel id, then the
//! payload. Exec and attach: 0 stdin, 1 stdout, 2 stderr, 3 status (`v4`/`v5`: a
//! JSON `v1.Status`; `channel.k8s.io`: the error text), 4 resize, and in `v5` 255
//! "close": `[255, 0]` ends stdin. Port-forward: for the k-th requested port, channel
//! 2k carries data and 2k+1 errors, and the first frame the kubelet writes on each
//! carries the port, 2 bytes little-endian.
//!
//! Commands (exec): `echo ARGS...` prints ARGS; `cat` copies stdin to stdout until
//! stdin ends; `false` exits 1 and `sh -c 'exit N'` exits N (a `NonZeroExitCode`
//! Status, as a real kubelet sends); anything else prints `ran: <argv>`. Attach
//! prints `attached to {ns}/{pod}/{container}`, then copies stdin like `cat`.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures::{SinkExt, StreamExt};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::derive_accept_key;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role};

use super::Shared;
use super::server::query_values;

/// Exec and attach subprotocols, newest first.
pub const REMOTE_COMMAND_PROTOCOLS: [&str; 3] =
    ["v5.channel.k8s.io", "v4.channel.k8s.io", "channel.k8s.io"];
/// Port-forward subprotocols (a real kubelet speaks `v4.channel.k8s.io` here).
pub const PORT_FORWARD_PROTOCOLS: [&str; 2] = ["v4.channel.k8s.io", "portforward.k8s.io"];
/// The answer (400) to a SPDY upgrade, or a WebSocket one offering only SPDY tunnels.
pub const SPDY_REFUSAL: &str = "SPDY not supported by the test kubelet";

const STDIN: u8 = 0;
const STDOUT: u8 = 1;
const STATUS: u8 = 3;
const CLOSE: u8 = 255;
/// How long the kubelet waits for the caller's close frame after sending its own.
const CLOSE_GRACE: Duration = Duration::from_secs(5);

type Ws = WebSocketStream<TokioIo<hyper::upgrade::Upgraded>>;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum StreamKind {
    Exec,
    Attach,
}

/// An accepted upgrade: the 101 answer and what to take the connection from.
struct Accepted {
    response: Response,
    protocol: Option<String>,
    on_upgrade: OnUpgrade,
}

fn refuse(status: StatusCode, message: &str) -> Response {
    (status, format!("{message}\n")).into_response()
}

fn refuse_boxed(status: StatusCode, message: &str) -> Box<Response> {
    Box::new(refuse(status, message))
}

/// Checks the WebSocket handshake and picks the first protocol the caller offers
/// that `supported` holds (no offer: the binary default, no protocol).
fn accept(request: &mut Request, supported: &[&str]) -> Result<Accepted, Box<Response>> {
    let headers = request.headers();
    let upgrade = headers
        .get(header::UPGRADE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    if upgrade.to_ascii_lowercase().contains("spdy") {
        return Err(refuse_boxed(StatusCode::BAD_REQUEST, SPDY_REFUSAL));
    }
    if !upgrade.eq_ignore_ascii_case("websocket") {
        return Err(refuse_boxed(
            StatusCode::BAD_REQUEST,
            "this endpoint needs a WebSocket upgrade",
        ));
    }
    let Some(key) = headers.get(header::SEC_WEBSOCKET_KEY) else {
        return Err(refuse_boxed(
            StatusCode::BAD_REQUEST,
            "missing Sec-WebSocket-Key",
        ));
    };
    let accept_key = derive_accept_key(key.as_bytes());
    let offered: Vec<String> = headers
        .get_all(header::SEC_WEBSOCKET_PROTOCOL)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|p| p.trim().to_owned())
        .filter(|p| !p.is_empty())
        .collect();
    let protocol = if offered.is_empty() {
        None
    } else {
        match offered.iter().find(|p| supported.contains(&p.as_str())) {
            Some(p) => Some(p.clone()),
            None if offered
                .iter()
                .any(|p| p.to_ascii_lowercase().contains("spdy")) =>
            {
                return Err(refuse_boxed(StatusCode::BAD_REQUEST, SPDY_REFUSAL));
            }
            None => {
                return Err(refuse_boxed(
                    StatusCode::BAD_REQUEST,
                    &format!(
                        "none of the offered protocols {offered:?} is supported (supported: {supported:?})"
                    ),
                ));
            }
        }
    };
    let Some(on_upgrade) = request.extensions_mut().remove::<OnUpgrade>() else {
        return Err(refuse_boxed(
            StatusCode::INTERNAL_SERVER_ERROR,
            "the connection cannot be upgraded",
        ));
    };
    let mut response = StatusCode::SWITCHING_PROTOCOLS.into_response();
    let out = response.headers_mut();
    out.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
    out.insert(header::CONNECTION, HeaderValue::from_static("Upgrade"));
    match HeaderValue::from_str(&accept_key) {
        Ok(v) => out.insert(header::SEC_WEBSOCKET_ACCEPT, v),
        Err(_) => {
            return Err(refuse_boxed(
                StatusCode::BAD_REQUEST,
                "bad Sec-WebSocket-Key",
            ));
        }
    };
    if let Some(p) = &protocol
        && let Ok(v) = HeaderValue::from_str(p)
    {
        out.insert(header::SEC_WEBSOCKET_PROTOCOL, v);
    }
    Ok(Accepted {
        response,
        protocol,
        on_upgrade,
    })
}

/// Takes the upgraded connection and runs `serve` on it, tracked by `shared`.
fn spawn_ws<F, Fut>(shared: &Shared, on_upgrade: OnUpgrade, serve: F)
where
    F: FnOnce(Ws) -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send,
{
    let task = tokio::spawn(async move {
        match on_upgrade.await {
            Ok(upgraded) => {
                let ws =
                    WebSocketStream::from_raw_socket(TokioIo::new(upgraded), Role::Server, None)
                        .await;
                serve(ws).await;
            }
            Err(err) => tracing::debug!(error = %err, "test kubelet: upgrade failed"),
        }
    });
    shared.track(task.abort_handle());
}

fn flag(request: &Request, keys: &[&str]) -> bool {
    keys.iter().any(|key| {
        query_values(request, key)
            .first()
            .is_some_and(|v| v == "1" || v.eq_ignore_ascii_case("true"))
    })
}

/// What the caller asked for.
struct Session {
    kind: StreamKind,
    target: String,
    command: Vec<String>,
    stdin: bool,
    stdout: bool,
    /// `v4`/`v5` send a JSON Status; `v5` also has the close channel.
    version: u8,
}

/// `/exec/...` and `/attach/...`.
pub(super) fn remote_command(
    shared: Arc<Shared>,
    kind: StreamKind,
    ns: String,
    pod: String,
    container: String,
    mut request: Request,
) -> Response {
    // Through the API server the kubelet sees input/output/error/tty; direct
    // callers may use the API server's stdin/stdout/stderr names.
    let session = Session {
        kind,
        target: format!("{ns}/{pod}/{container}"),
        command: query_values(&request, "command"),
        stdin: flag(&request, &["input", "stdin"]),
        stdout: flag(&request, &["output", "stdout"]) || flag(&request, &["tty"]),
        version: 0,
    };
    let accepted = match accept(&mut request, &REMOTE_COMMAND_PROTOCOLS) {
        Ok(a) => a,
        Err(refusal) => return *refusal,
    };
    let version = match accepted.protocol.as_deref() {
        Some("v5.channel.k8s.io") => 5,
        Some("v4.channel.k8s.io") => 4,
        _ => 1,
    };
    let session = Session { version, ..session };
    spawn_ws(&shared, accepted.on_upgrade, move |ws| {
        run_command(ws, session)
    });
    accepted.response
}

/// How the command ended: `None` when the caller went away first.
type Exit = Option<i32>;

async fn run_command(mut ws: Ws, session: Session) {
    let exit: Exit = match session.kind {
        StreamKind::Attach => {
            let line = format!("attached to {}\n", session.target);
            if write_out(&mut ws, &session, line.as_bytes()).await {
                copy_stdin(&mut ws, &session).await.then_some(0)
            } else {
                None
            }
        }
        StreamKind::Exec => exec(&mut ws, &session).await,
    };
    let Some(code) = exit else {
        return;
    };
    let status = status_frame(&session, code);
    if let Some(frame) = status
        && ws.send(Message::binary(frame)).await.is_err()
    {
        return;
    }
    close(ws).await;
}

async fn exec(ws: &mut Ws, session: &Session) -> Exit {
    let argv = &session.command;
    let program = argv.first().map(String::as_str).unwrap_or_default();
    match program {
        "echo" => {
            let line = format!("{}\n", argv[1..].join(" "));
            write_out(ws, session, line.as_bytes()).await.then_some(0)
        }
        "cat" if argv.len() == 1 => copy_stdin(ws, session).await.then_some(0),
        "false" if argv.len() == 1 => Some(1),
        "sh" if argv.len() == 3 && argv[1] == "-c" => match shell_exit(&argv[2]) {
            Some(code) => Some(code),
            None => ran(ws, session).await,
        },
        _ => ran(ws, session).await,
    }
}

/// `exit N` (N in 0..=255), as `sh -c` would run it.
fn shell_exit(script: &str) -> Option<i32> {
    let code = script.trim().strip_prefix("exit")?.trim();
    if code.is_empty() {
        return Some(0);
    }
    code.parse::<u8>().ok().map(i32::from)
}

async fn ran(ws: &mut Ws, session: &Session) -> Exit {
    let line = format!("ran: {}\n", session.command.join(" "));
    write_out(ws, session, line.as_bytes()).await.then_some(0)
}

/// Writes to stdout (when the caller asked for it). False when the caller is gone.
async fn write_out(ws: &mut Ws, session: &Session, bytes: &[u8]) -> bool {
    if !session.stdout || bytes.is_empty() {
        return true;
    }
    let mut frame = Vec::with_capacity(bytes.len() + 1);
    frame.push(STDOUT);
    frame.extend_from_slice(bytes);
    ws.send(Message::binary(frame)).await.is_ok()
}

/// Copies stdin to stdout until stdin ends (`v5` close frame). False when the
/// caller closed the connection or it broke (in `v4` that is how stdin ends, and
/// no one is left to read a status).
async fn copy_stdin(ws: &mut Ws, session: &Session) -> bool {
    if !session.stdin {
        return true;
    }
    while let Some(message) = ws.next().await {
        let Ok(message) = message else {
            return false;
        };
        match message {
            Message::Binary(data) => match data.first() {
                // Stdin is echoed; a caller gone while it is written ends the copy.
                Some(&STDIN) if !write_out(ws, session, &data[1..]).await => return false,
                Some(&CLOSE) if session.version >= 5 && data.get(1) == Some(&STDIN) => {
                    return true;
                }
                // Resize and anything else: ignored.
                _ => {}
            },
            Message::Close(_) => return false,
            _ => {}
        }
    }
    false
}

fn status_frame(session: &Session, code: i32) -> Option<Vec<u8>> {
    let message = format!(
        "command terminated with non-zero exit code: error executing command {:?}, exit code {code}",
        session.command
    );
    let body = if session.version >= 4 {
        let status = if code == 0 {
            serde_json::json!({ "metadata": {}, "status": "Success" })
        } else {
            serde_json::json!({
                "metadata": {},
                "status": "Failure",
                "message": message,
                "reason": "NonZeroExitCode",
                "details": { "causes": [{ "reason": "ExitCode", "message": code.to_string() }] },
            })
        };
        status.to_string()
    } else if code == 0 {
        return None;
    } else {
        message
    };
    let mut frame = Vec::with_capacity(body.len() + 1);
    frame.push(STATUS);
    frame.extend_from_slice(body.as_bytes());
    Some(frame)
}

/// Sends a close frame (1000, normal: kubectl's client takes a close without a
/// code, 1005, for an error) and waits (bounded) for the caller's.
async fn close(mut ws: Ws) {
    let normal = CloseFrame {
        code: CloseCode::Normal,
        reason: "".into(),
    };
    if ws.close(Some(normal)).await.is_err() {
        return;
    }
    let _ = tokio::time::timeout(CLOSE_GRACE, async {
        while let Some(Ok(_)) = ws.next().await {}
    })
    .await;
}

/// `/portForward/{ns}/{pod}`: an echo server on every requested port.
pub(super) fn port_forward(shared: Arc<Shared>, mut request: Request) -> Response {
    // The protocol first: SPDY carries its ports in stream headers, not the query.
    let accepted = match accept(&mut request, &PORT_FORWARD_PROTOCOLS) {
        Ok(a) => a,
        Err(refusal) => return *refusal,
    };
    let mut ports = Vec::new();
    for value in query_values(&request, "port")
        .into_iter()
        .chain(query_values(&request, "ports"))
    {
        for part in value.split(',') {
            match part.trim().parse::<u16>() {
                Ok(port) if port > 0 => ports.push(port),
                _ => {
                    return refuse(
                        StatusCode::BAD_REQUEST,
                        &format!("invalid port {part:?}: a port is 1 to 65535"),
                    );
                }
            }
        }
    }
    if ports.is_empty() {
        return refuse(StatusCode::BAD_REQUEST, "at least one port is required");
    }
    spawn_ws(&shared, accepted.on_upgrade, move |ws| {
        echo_ports(ws, ports)
    });
    accepted.response
}

async fn echo_ports(mut ws: Ws, ports: Vec<u16>) {
    for (i, port) in ports.iter().enumerate() {
        let Ok(data) = u8::try_from(2 * i) else {
            return;
        };
        let [lo, hi] = port.to_le_bytes();
        for channel in [data, data.saturating_add(1)] {
            if ws
                .send(Message::binary(vec![channel, lo, hi]))
                .await
                .is_err()
            {
                return;
            }
        }
    }
    while let Some(Ok(message)) = ws.next().await {
        match message {
            Message::Binary(data) if data.len() > 1 => {
                let channel = usize::from(data[0]);
                // Data for a requested port's data channel: echo it back.
                if channel % 2 == 0
                    && channel / 2 < ports.len()
                    && ws.send(Message::binary(data)).await.is_err()
                {
                    return;
                }
            }
            Message::Close(_) => break,
            _ => {}
        }
    }
    close(ws).await;
}

#[cfg(test)]
mod tests {
    use super::shell_exit;

    #[test]
    fn shell_exit_codes() {
        assert_eq!(shell_exit("exit 3"), Some(3));
        assert_eq!(shell_exit(" exit  0 "), Some(0));
        assert_eq!(shell_exit("exit"), Some(0));
        assert_eq!(shell_exit("exit 256"), None);
        assert_eq!(shell_exit("echo hi"), None);
    }
}
