//! A scripted API server for unit tests: a `kube::Client` whose requests are
//! recorded and answered, in order, from a script. Tests then assert exactly what
//! the engine sent (method, path, query, body) and how it reacted to each answer.
//! A request beyond the script is answered 500 (and recorded), so an unexpected
//! extra request shows up in the count of requests sent.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, PoisonError};

use http::{Request, Response};
use kube::Client;
use kube::client::Body;
use serde_json::{Value, json};

/// One request the client sent.
#[derive(Clone, Debug)]
pub(crate) struct Sent {
    pub method: http::Method,
    pub path: String,
    pub query: Option<String>,
    /// The JSON body, if any.
    pub body: Option<Value>,
}

/// How one scripted request is answered: with a status and a JSON body, or not at
/// all (the connection fails: `kube::Error::Service`).
enum Answer {
    Json(u16, Value),
    Unreachable,
}

type Reply = Box<dyn FnOnce(&[Sent]) -> Answer + Send>;

#[derive(Default)]
struct State {
    sent: Vec<Sent>,
    script: VecDeque<Reply>,
}

/// The scripted server; cheap to clone (clones share the script and the record).
#[derive(Clone, Default)]
pub(crate) struct MockApi {
    state: Arc<Mutex<State>>,
}

/// A `metav1.Status` failure body, as the API server answers.
pub(crate) fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({
        "apiVersion": "v1",
        "kind": "Status",
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": message,
        "metadata": {},
    })
}

impl MockApi {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A client talking to this server.
    pub(crate) fn client(&self) -> Client {
        let mock = self.clone();
        let service = tower::service_fn(move |request: Request<Body>| {
            let mock = mock.clone();
            async move { mock.answer(request).await }
        });
        Client::new(service, "default")
    }

    async fn answer(
        &self,
        request: Request<Body>,
    ) -> Result<Response<Body>, Box<dyn std::error::Error + Send + Sync>> {
        let (parts, body) = request.into_parts();
        let bytes = body.collect_bytes().await?;
        let sent = Sent {
            method: parts.method,
            path: parts.uri.path().to_owned(),
            query: parts.uri.query().map(str::to_owned),
            body: serde_json::from_slice(&bytes).ok(),
        };
        let answer = {
            let mut state = self.state();
            state.sent.push(sent);
            match state.script.pop_front() {
                Some(reply) => reply(&state.sent),
                None => Answer::Json(
                    500,
                    status(500, "InternalError", "the mock has no answer scripted"),
                ),
            }
        };
        match answer {
            Answer::Json(code, value) => Ok(Response::builder()
                .status(code)
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&value)?))?),
            Answer::Unreachable => Err("connection refused (scripted)".into()),
        }
    }

    /// Answers the next request with `code` and `body`.
    pub(crate) fn reply(&self, code: u16, body: Value) -> &Self {
        self.reply_with(move |_| (code, body))
    }

    /// Answers the next request from what was sent so far (the last is this one).
    pub(crate) fn reply_with(
        &self,
        reply: impl FnOnce(&[Sent]) -> (u16, Value) + Send + 'static,
    ) -> &Self {
        self.state().script.push_back(Box::new(move |sent| {
            let (code, body) = reply(sent);
            Answer::Json(code, body)
        }));
        self
    }

    /// The next request fails to connect.
    pub(crate) fn unreachable(&self) -> &Self {
        self.state()
            .script
            .push_back(Box::new(|_| Answer::Unreachable));
        self
    }

    /// Every request sent so far, in order.
    pub(crate) fn sent(&self) -> Vec<Sent> {
        self.state().sent.clone()
    }

    /// The requests sent so far as `METHOD path`, for short assertions.
    pub(crate) fn calls(&self) -> Vec<String> {
        self.state()
            .sent
            .iter()
            .map(|s| format!("{} {}", s.method, s.path))
            .collect()
    }

    /// How many scripted answers are still unused.
    pub(crate) fn unanswered(&self) -> usize {
        self.state().script.len()
    }
}
