//! Children of a test, killed (and reaped) when their guard drops, so a
//! failing test leaves no process behind.

use std::process::Child;

/// A child process killed (and reaped) on drop.
pub struct ChildGuard {
    child: Option<Child>,
    pub name: &'static str,
}

impl ChildGuard {
    pub fn new(child: Child, name: &'static str) -> ChildGuard {
        ChildGuard {
            child: Some(child),
            name,
        }
    }

    /// The child's process id; None once it was killed.
    pub fn id(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The child's exit status if it has exited (it is reaped then).
    pub fn try_wait(&mut self) -> Option<std::process::ExitStatus> {
        self.child
            .as_mut()
            .and_then(|c| c.try_wait().ok().flatten())
    }

    pub fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Wait until the server `guard` runs answers `GET path` on `addr` with 200;
/// panic naming `name`, with what it wrote to `log` (its log file), when it
/// exits or `within` passes first. The readiness wait of every HTTP server a
/// test starts.
pub async fn wait_http_ready(
    guard: &mut ChildGuard,
    addr: std::net::SocketAddr,
    path: &str,
    name: &str,
    within: std::time::Duration,
    log: &std::path::Path,
) {
    let log = || std::fs::read_to_string(log).unwrap_or_default();
    use std::time::Duration;
    let ready = crate::wait::poll(within, Duration::from_millis(200), || {
        let exited = guard.try_wait();
        async move {
            if let Some(st) = exited {
                return Ok(Some(st));
            }
            use etcd_readiness_exporter::outside::http_client;
            match http_client::get_at(addr, path, None, Duration::from_secs(2)).await {
                Ok(a) if a.status == 200 => Ok(None),
                _ => Err(()),
            }
        }
    })
    .await;
    match ready {
        Ok(None) => {}
        Ok(Some(st)) => panic!("{name} exited with {st}:\n{}", log()),
        Err(()) => panic!("{name} not ready in {within:?}:\n{}", log()),
    }
}
