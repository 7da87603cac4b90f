//! The operator's requests to the Kubernetes API, paced and counted: a
//! token bucket that refills `qps` tokens a second and holds at most
//! `burst` (client-go's QPS and Burst; flags `--kube-api-qps`,
//! `--kube-api-burst`), as a tower layer on the kube client, so that many
//! scans never flood the API server every tenant shares. A request waits
//! for its token; a watch is one request (only its start is paced). Every
//! request is counted (`bucketscan_kube_api_requests_total`).
//!
//! May import: nothing of the crate.

use prometheus_client::metrics::counter::Counter;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Tokens that refill at `per_second`, at most `burst` held.
#[derive(Clone, Debug)]
pub struct TokenBucket {
    per_second: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// Full at first (a start may use the whole burst).
    pub fn new(per_second: f64, burst: u32, now: Instant) -> TokenBucket {
        let burst = f64::from(burst.max(1));
        TokenBucket {
            per_second: per_second.max(0.001),
            burst,
            tokens: burst,
            at: now,
        }
    }

    /// Take a token: `None` when one was there, else how long until one is.
    pub fn take(&mut self, now: Instant) -> Option<Duration> {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.per_second).min(self.burst);
        self.at = now;
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            return None;
        }
        Some(Duration::from_secs_f64((1.0 - self.tokens) / self.per_second))
    }
}

/// The layer: `qps` and `burst` for every request of the client it wraps.
#[derive(Clone, Debug)]
pub struct Throttle {
    pub qps: f64,
    pub burst: u32,
    /// Counts every request sent.
    pub sent: Counter,
}

impl<S> tower_layer::Layer<S> for Throttle {
    type Service = Throttled<S>;

    fn layer(&self, inner: S) -> Throttled<S> {
        Throttled {
            inner,
            bucket: TokenBucket::new(self.qps, self.burst, Instant::now()),
            waiting: None,
            has_token: false,
            sent: self.sent.clone(),
        }
    }
}

/// A service whose requests each wait for a token. kube's client calls it
/// through a buffer, one `poll_ready` before each `call`.
pub struct Throttled<S> {
    inner: S,
    bucket: TokenBucket,
    waiting: Option<Pin<Box<Sleep>>>,
    /// A token was taken for the next call (the inner service may not be
    /// ready yet: the token is kept, not taken twice).
    has_token: bool,
    sent: Counter,
}

impl<S, R> tower_service::Service<R> for Throttled<S>
where
    S: tower_service::Service<R>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        while !self.has_token {
            if let Some(sleep) = self.waiting.as_mut() {
                if sleep.as_mut().poll(cx).is_pending() {
                    return Poll::Pending;
                }
                self.waiting = None;
            }
            match self.bucket.take(Instant::now()) {
                None => self.has_token = true,
                Some(wait) => self.waiting = Some(Box::pin(tokio::time::sleep(wait))),
            }
        }
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: R) -> S::Future {
        self.has_token = false;
        self.sent.inc();
        self.inner.call(request)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_the_steady_rate() {
        let start = Instant::now();
        let mut bucket = TokenBucket::new(50.0, 100, start);
        for _ in 0..100 {
            assert_eq!(bucket.take(start), None);
        }
        let wait = bucket.take(start).unwrap();
        assert!((wait.as_secs_f64() - 0.02).abs() < 1e-9, "{wait:?}");
        // A second later: 50 more, not 100.
        let later = start + Duration::from_secs(1);
        let granted = (0..200).take_while(|_| bucket.take(later).is_none()).count();
        assert_eq!(granted, 50);
        // Idle for long: never more than the burst.
        let much_later = later + Duration::from_secs(3600);
        let granted = (0..200).take_while(|_| bucket.take(much_later).is_none()).count();
        assert_eq!(granted, 100);
    }

    #[tokio::test(start_paused = true)]
    async fn requests_past_the_burst_wait_for_their_token() {
        use tower_layer::Layer;
        use tower_service::Service;
        let sent = Counter::default();
        let throttle = Throttle {
            qps: 10.0,
            burst: 5,
            sent: sent.clone(),
        };
        let mut service = throttle.layer(tower_service_fn());
        let start = Instant::now();
        for _ in 0..25 {
            std::future::poll_fn(|cx| service.poll_ready(cx)).await.unwrap();
            service.call(()).await.unwrap();
        }
        // 5 at once, the other 20 at 10 a second.
        let took = start.elapsed();
        assert!(
            took >= Duration::from_millis(1990) && took < Duration::from_millis(2100),
            "{took:?}"
        );
        assert_eq!(sent.get(), 25);
    }

    /// A service that answers at once.
    fn tower_service_fn(
    ) -> impl tower_service::Service<(), Response = (), Error = (), Future = std::future::Ready<Result<(), ()>>>
    {
        struct Answer;
        impl tower_service::Service<()> for Answer {
            type Response = ();
            type Error = ();
            type Future = std::future::Ready<Result<(), ()>>;
            fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), ()>> {
                Poll::Ready(Ok(()))
            }
            fn call(&mut self, _: ()) -> Self::Future {
                std::future::ready(Ok(()))
            }
        }
        Answer
    }
}
