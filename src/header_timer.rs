//! hyper's HTTP/1 header-read timeout with one tokio timer per connection.
//!
//! hyper asks its `Timer` for a new `Sleep` at the start of every request
//! head and drops it once the head is read. With hyper-util's `TokioTimer`
//! that is an allocation, a timer-wheel registration and a removal per
//! request: about 9 points of HTTP/1.1 throughput at saturation (make bench,
//! docs/development.md). The timeout itself is the slow-loris defence, so it
//! stays; this `Timer` makes it cheap. Every `Sleep` it hands out drives the
//! same tokio `Sleep`, kept for the connection's life: re-arming it for a
//! later deadline only moves its expiry, without touching the wheel.
//!
//! One `ConnTimer` per connection, for its HTTP/1 header timeout only: hyper
//! keeps at most one such `Sleep` alive per connection, which is what makes
//! sharing the tokio timer sound. HTTP/2's pings keep hyper-util's timer.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use hyper::rt::{Sleep, Timer};

/// The per-connection timer (see the module's comment).
#[derive(Clone)]
pub struct ConnTimer {
    shared: Arc<Mutex<Option<Pin<Box<tokio::time::Sleep>>>>>,
}

impl ConnTimer {
    pub fn new() -> Self {
        ConnTimer {
            shared: Arc::new(Mutex::new(None)),
        }
    }
}

impl Default for ConnTimer {
    fn default() -> Self {
        Self::new()
    }
}

impl Timer for ConnTimer {
    fn sleep(&self, duration: Duration) -> Pin<Box<dyn Sleep>> {
        self.sleep_until(self.now() + duration)
    }

    /// tokio's clock, which the deadlines are measured on (the same as
    /// std's, except in tests with a paused clock).
    fn now(&self) -> Instant {
        tokio::time::Instant::now().into_std()
    }

    fn sleep_until(&self, deadline: Instant) -> Pin<Box<dyn Sleep>> {
        Box::pin(SharedSleep {
            deadline: deadline.into(),
            shared: self.shared.clone(),
        })
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn Sleep>>, new_deadline: Instant) {
        *sleep = self.sleep_until(new_deadline);
    }
}

/// A deadline; polling it arms the connection's tokio timer for it.
struct SharedSleep {
    deadline: tokio::time::Instant,
    shared: Arc<Mutex<Option<Pin<Box<tokio::time::Sleep>>>>>,
}

impl Future for SharedSleep {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        // Past the deadline: no timer needed (and none to wait for).
        if tokio::time::Instant::now() >= self.deadline {
            return Poll::Ready(());
        }
        let Ok(mut slot) = self.shared.lock() else {
            // Poisoned only by a panic in this very poll; a timeout that
            // fires is the safe answer (the connection closes).
            return Poll::Ready(());
        };
        let timer = slot.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(self.deadline)));
        if timer.deadline() != self.deadline {
            timer.as_mut().reset(self.deadline);
        }
        timer.as_mut().poll(cx)
    }
}

impl Sleep for SharedSleep {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Each new deadline is honoured, earlier or later than the last one,
    /// through the one shared timer.
    #[tokio::test(start_paused = true)]
    async fn every_sleep_ends_at_its_own_deadline() {
        let t = ConnTimer::new();
        for ms in [300u64, 50, 1000, 10] {
            let start = tokio::time::Instant::now();
            t.sleep(Duration::from_millis(ms)).await;
            let took = start.elapsed();
            assert!(
                took >= Duration::from_millis(ms) && took < Duration::from_millis(ms + 5),
                "{ms} ms sleep took {took:?}"
            );
        }
    }

    /// A sleep dropped before its deadline (a head read in time) leaves
    /// nothing that fires on the next one.
    #[tokio::test(start_paused = true)]
    async fn a_dropped_sleep_does_not_cut_the_next_one_short() {
        let t = ConnTimer::new();
        let first = t.sleep(Duration::from_millis(20));
        let early = tokio::time::timeout(Duration::from_millis(5), first).await;
        assert!(early.is_err(), "not due yet");
        let start = tokio::time::Instant::now();
        t.sleep(Duration::from_secs(30)).await;
        assert!(start.elapsed() >= Duration::from_secs(30));
    }
}
