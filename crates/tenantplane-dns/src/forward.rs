//! Forwarding names outside the cluster domain to the upstream resolver, over UDP.

use std::net::SocketAddr;
use std::time::Duration;

use hickory_proto::op::Message;
use tokio::net::UdpSocket;

/// How long the upstream gets to answer before the client gets SERVFAIL.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(3);

/// Why a forwarded query got no answer.
#[derive(Debug, thiserror::Error)]
pub enum ForwardError {
    #[error("upstream {upstream}: {source}")]
    Io {
        upstream: SocketAddr,
        source: std::io::Error,
    },
    #[error("upstream {upstream} did not answer within {UPSTREAM_TIMEOUT:?}")]
    Timeout { upstream: SocketAddr },
    #[error("upstream {upstream} sent an unreadable answer: {reason}")]
    Malformed {
        upstream: SocketAddr,
        reason: String,
    },
}

/// Sends the raw query to `upstream` and returns its parsed answer (with the id
/// checked, so a stray datagram is never relayed).
pub async fn forward(raw: &[u8], id: u16, upstream: SocketAddr) -> Result<Message, ForwardError> {
    let io = |source| ForwardError::Io { upstream, source };
    let local: SocketAddr = if upstream.is_ipv4() {
        ([0, 0, 0, 0], 0).into()
    } else {
        ([0u16; 8], 0).into()
    };
    let socket = UdpSocket::bind(local).await.map_err(io)?;
    socket.connect(upstream).await.map_err(io)?;
    socket.send(raw).await.map_err(io)?;
    let mut buf = vec![0u8; 65_535];
    let deadline = tokio::time::Instant::now() + UPSTREAM_TIMEOUT;
    loop {
        let len = tokio::time::timeout_at(deadline, socket.recv(&mut buf))
            .await
            .map_err(|_| ForwardError::Timeout { upstream })?
            .map_err(io)?;
        let message = Message::from_vec(buf.get(..len).unwrap_or_default()).map_err(|e| {
            ForwardError::Malformed {
                upstream,
                reason: e.to_string(),
            }
        })?;
        if message.metadata.id == id {
            return Ok(message);
        }
    }
}

/// The first `nameserver` of a resolv.conf text, on port 53.
pub fn upstream_from_resolv_conf(text: &str) -> Option<SocketAddr> {
    text.lines()
        .filter_map(|line| line.trim().strip_prefix("nameserver"))
        .filter_map(|rest| rest.split_whitespace().next())
        // A scoped IPv6 address (fe80::1%eth0) has no SocketAddr form without the scope.
        .filter_map(|ip| ip.split('%').next()?.parse::<std::net::IpAddr>().ok())
        .map(|ip| SocketAddr::new(ip, 53))
        .next()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn first_nameserver_wins() {
        let text = "# generated\nsearch x\nnameserver 10.96.0.10\nnameserver 8.8.8.8\n";
        assert_eq!(
            upstream_from_resolv_conf(text),
            Some("10.96.0.10:53".parse().unwrap())
        );
        assert_eq!(
            upstream_from_resolv_conf("nameserver ::1\n"),
            Some("[::1]:53".parse().unwrap())
        );
        assert_eq!(upstream_from_resolv_conf("nameserver bogus\n"), None);
        assert_eq!(upstream_from_resolv_conf(""), None);
    }
}
