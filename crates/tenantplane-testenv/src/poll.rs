//! Polling with a deadline, the only way tests wait: one copy for every test binary.
//!
//! A check answers `Option<T>` (`None`: not yet) or `Result<T, E>` (`Err`: not yet,
//! and why: the last reason is shown when the deadline passes).

use std::fmt::Debug;
use std::future::Future;
use std::time::{Duration, Instant};

/// How often a check runs.
pub const POLL_INTERVAL: Duration = Duration::from_millis(50);

/// One answer of a polled check.
pub trait Attempt {
    type Output;
    /// The value once settled; otherwise why not, if the check said.
    fn settled(self) -> Result<Self::Output, Option<String>>;
}

impl<T> Attempt for Option<T> {
    type Output = T;
    fn settled(self) -> Result<T, Option<String>> {
        self.ok_or(None)
    }
}

impl<T, E: Debug> Attempt for Result<T, E> {
    type Output = T;
    fn settled(self) -> Result<T, Option<String>> {
        self.map_err(|e| Some(format!("{e:?}")))
    }
}

/// Runs `check` every [`POLL_INTERVAL`] until it settles and returns its value;
/// panics (failing the test) with `what` and the last reason once `deadline` passes.
pub async fn eventually<A, F, Fut>(what: &str, deadline: Duration, mut check: F) -> A::Output
where
    A: Attempt,
    F: FnMut() -> Fut,
    Fut: Future<Output = A>,
{
    let start = Instant::now();
    loop {
        let last = match check().await.settled() {
            Ok(value) => {
                // Captured by the test harness, so shown only when a test fails:
                // which waits were slow.
                eprintln!("waited {:?} for: {what}", start.elapsed());
                return value;
            }
            Err(last) => last,
        };
        if start.elapsed() >= deadline {
            match last {
                Some(last) => {
                    panic!("timed out after {deadline:?} waiting for: {what}; last answer: {last}")
                }
                None => panic!("timed out after {deadline:?} waiting for: {what}"),
            }
        }
        tokio::time::sleep(POLL_INTERVAL).await;
    }
}

/// Sends `attempt` until the API server answers with a refusal whose message names
/// `refused_by` (it loads admission webhook configurations asynchronously). Any
/// other API answer means "not yet"; a transport error fails the test at once.
pub async fn until_refused<T, F, Fut>(refused_by: &str, deadline: Duration, mut attempt: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, kube::Error>>,
{
    eventually(&format!("a refusal by {refused_by}"), deadline, || {
        let answer = attempt();
        async move {
            match answer.await {
                Err(kube::Error::Api(status)) if status.message.contains(refused_by) => Ok(()),
                Ok(_) => Err("admitted".to_owned()),
                Err(kube::Error::Api(status)) => Err(status.message),
                Err(other) => panic!("request failed: {other:?}"),
            }
        }
    })
    .await;
}

/// `GET path` over plain HTTP/1.0 on a loopback `port` (a process's `/metrics`,
/// `/healthz`): the status code and body, or `None` while nothing answers.
pub async fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    stream
        .write_all(format!("GET {path} HTTP/1.0\r\nHost: x\r\n\r\n").as_bytes())
        .await
        .ok()?;
    let mut text = String::new();
    stream.read_to_string(&mut text).await.ok()?;
    let code = text.split_whitespace().nth(1)?.parse().ok()?;
    let body = text
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_owned())
        .unwrap_or_default();
    Some((code, body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn returns_the_value_once_settled() {
        let mut calls = 0;
        let value = eventually("the third call", Duration::from_secs(5), || {
            calls += 1;
            let n = calls;
            async move { (n >= 3).then_some(n) }
        })
        .await;
        assert_eq!(value, 3);
    }

    #[tokio::test]
    #[should_panic(expected = "waiting for: never; last answer: \"still 1\"")]
    async fn fails_at_the_deadline_with_the_last_reason() {
        eventually("never", Duration::from_millis(120), || async {
            Err::<(), _>("still 1")
        })
        .await;
    }

    #[tokio::test]
    #[should_panic(expected = "timed out after 100ms waiting for: nothing")]
    async fn fails_at_the_deadline_without_a_reason() {
        eventually("nothing", Duration::from_millis(100), || async {
            None::<()>
        })
        .await;
    }
}
