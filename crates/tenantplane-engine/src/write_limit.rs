//! A cap on the host writes one controller process has in flight, across every
//! TenantCluster it serves. Each engine has its own workers and token bucket, so
//! without a cap 1,000 TenantClusters x 16 workers could send thousands of writes
//! at once; the host API server then times out (seen at 1,000 x 10: 49,116
//! answers "resource quota evaluation timed out", 5.25 POSTs per copy). Reads and
//! watches are not capped: they do not queue behind writes.
//!
//! Hand-written rather than tower's `ConcurrencyLimit`: that one takes its permit
//! in `poll_ready`, before the request is known, so it would cap watches too.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::{Method, Request};
use tokio::sync::Semaphore;
use tower::{Layer, Service};

/// Wraps a client's service so at most `limit` writes are in flight at once.
#[derive(Clone)]
pub struct WriteLimitLayer {
    permits: Arc<Semaphore>,
}

impl WriteLimitLayer {
    pub fn new(limit: usize) -> Self {
        Self {
            permits: Arc::new(Semaphore::new(limit.max(1))),
        }
    }
}

impl<S> Layer<S> for WriteLimitLayer {
    type Service = WriteLimit<S>;

    fn layer(&self, inner: S) -> Self::Service {
        WriteLimit {
            inner,
            permits: Arc::clone(&self.permits),
        }
    }
}

pub struct WriteLimit<S> {
    inner: S,
    permits: Arc<Semaphore>,
}

fn is_write(method: &Method) -> bool {
    !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

impl<S, B> Service<Request<B>> for WriteLimit<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<S::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<B>) -> Self::Future {
        let permits = is_write(request.method()).then(|| Arc::clone(&self.permits));
        // The client's futures send nothing until polled, so the request waits
        // for its permit here.
        let response = self.inner.call(request);
        Box::pin(async move {
            let _permit = match permits {
                // The semaphore is never closed: an error cannot happen.
                Some(permits) => permits.acquire_owned().await.ok(),
                None => None,
            };
            response.await
        })
    }
}

/// A client for `config` whose writes are capped at `writes_in_flight`.
pub fn write_limited_client(
    config: kube::Config,
    writes_in_flight: usize,
) -> Result<kube::Client, kube::Error> {
    Ok(kube::client::ClientBuilder::try_from(config)?
        .with_layer(&WriteLimitLayer::new(writes_in_flight))
        .build())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;
    use tower::ServiceExt;

    /// A service that records the most requests it ever had in flight at once.
    #[derive(Clone, Default)]
    struct Probe {
        now: Arc<AtomicUsize>,
        most: Arc<AtomicUsize>,
    }

    impl Service<Request<()>> for Probe {
        type Response = ();
        type Error = std::convert::Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<(), Self::Error>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, _: Request<()>) -> Self::Future {
            let (now, most) = (Arc::clone(&self.now), Arc::clone(&self.most));
            Box::pin(async move {
                let in_flight = now.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(in_flight, Ordering::SeqCst);
                // Holds the request open so the others pile up behind it.
                tokio::time::sleep(Duration::from_millis(20)).await;
                now.fetch_sub(1, Ordering::SeqCst);
                Ok(())
            })
        }
    }

    async fn most_in_flight(method: Method, limit: usize, requests: usize) -> usize {
        let probe = Probe::default();
        let layer = WriteLimitLayer::new(limit);
        let mut calls = Vec::new();
        for _ in 0..requests {
            let service = layer.layer(probe.clone());
            let request = Request::builder().method(method.clone()).body(()).unwrap();
            calls.push(tokio::spawn(service.oneshot(request)));
        }
        for call in calls {
            call.await.unwrap().unwrap();
        }
        probe.most.load(Ordering::SeqCst)
    }

    #[tokio::test]
    async fn writes_wait_for_a_permit() {
        for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
            assert_eq!(most_in_flight(method.clone(), 3, 12).await, 3, "{method}");
        }
    }

    #[tokio::test]
    async fn reads_and_watches_are_not_capped() {
        assert_eq!(most_in_flight(Method::GET, 3, 12).await, 12);
    }
}
