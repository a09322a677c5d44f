//! Waiting with a deadline: the one polling loop of the tests. A condition
//! is probed at a fixed step until it holds or the deadline passes; nothing
//! waits for a fixed time and hopes. [`poll`] returns the last failed probe
//! to a caller that explains it (the exporter's `wait_until` prints
//! `/readyz?verbose` and `/signals`); [`wait_until`] panics naming what it
//! waited for. [`poll_blocking`] is the same loop for test code without a
//! runtime (a plain `#[test]`, a thread). [`sample`] and
//! [`sample_blocking`] are the other kind of loop: they measure during a
//! window (every step for a time), and nothing fails when it ends. The
//! async ones keep time on the runtime's clock, so they wait the same on
//! tokio's paused clock (virtual time) as on the wall clock.
//! `.ci/test-loops` fails on a deadline loop written anywhere else in the
//! tests.

use std::future::Future;
use std::ops::ControlFlow;
use std::time::{Duration, Instant};

/// Probe every `every` until `probe` answers `Ok` (returned) or `within`
/// passes (the last `Err` returned). The probe runs at least once.
pub async fn poll<T, E, F, Fut>(within: Duration, every: Duration, mut probe: F) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<T, E>>,
{
    let end = tokio::time::Instant::now() + within;
    loop {
        match probe().await {
            Ok(v) => return Ok(v),
            Err(last) if tokio::time::Instant::now() >= end => return Err(last),
            Err(_) => tokio::time::sleep(every).await,
        }
    }
}

/// The blocking twin of [`poll`]: probe every `every` (sleeping the thread)
/// until `probe` answers `Ok` (returned) or `within` passes (the last `Err`
/// returned). The probe runs at least once.
pub fn poll_blocking<T, E>(
    within: Duration,
    every: Duration,
    mut probe: impl FnMut() -> Result<T, E>,
) -> Result<T, E> {
    let end = Instant::now() + within;
    loop {
        match probe() {
            Ok(v) => return Ok(v),
            Err(last) if Instant::now() >= end => return Err(last),
            Err(_) => std::thread::sleep(every),
        }
    }
}

/// The step of [`wait_until`] and [`until_some`].
const STEP: Duration = Duration::from_millis(20);

/// Poll `cond` every 20 ms until it is true; panic naming `what` when
/// `within` passes first.
pub async fn wait_until<F, Fut>(what: &str, within: Duration, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    until_some(what, within, || {
        let held = cond();
        async move { held.await.then_some(()) }
    })
    .await
}

/// Poll `f` every 20 ms until it returns `Some` (returned); panic naming
/// `what` when `within` passes first.
pub async fn until_some<T, F, Fut>(what: &str, within: Duration, mut f: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let polled = poll(within, STEP, || {
        let probe = f();
        async move { probe.await.ok_or(()) }
    })
    .await;
    polled.unwrap_or_else(|()| panic!("timed out after {within:?} waiting for {what}"))
}

/// Call `f` on a fixed schedule, every `step` (a late tick is caught up,
/// as `tokio::time::interval` does), for `window` or until it answers
/// `Break`: sampling while something happens, not waiting for a condition.
pub async fn sample<F, Fut>(window: Duration, step: Duration, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = ControlFlow<()>>,
{
    let end = tokio::time::Instant::now() + window;
    let mut tick = tokio::time::interval(step);
    while tokio::time::Instant::now() < end {
        tick.tick().await;
        if f().await.is_break() {
            return;
        }
    }
}

/// The blocking twin of [`sample`]: call `f`, then sleep the thread for
/// `step`, for `window` or until it answers `Break`.
pub fn sample_blocking(window: Duration, step: Duration, mut f: impl FnMut() -> ControlFlow<()>) {
    let end = Instant::now() + window;
    while Instant::now() < end {
        if f().is_break() {
            return;
        }
        std::thread::sleep(step);
    }
}
