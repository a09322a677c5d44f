//! Supervision of the exporter's long-running tasks (each sampler, the
//! engine, the policy watcher). [`Supervisor::spawn`] runs a task built by a
//! factory; when the task panics (or returns, which a loop never should) the
//! supervisor logs it with the task's name, counts it in
//! `etcd_readiness_task_restarts_total{task}`, remembers the panic for
//! `/livez?verbose`, waits a bounded exponential backoff and builds the task
//! again. A sampler that panics on some absurd input therefore comes back by
//! itself once the input is sane, instead of staying dead until the pod is
//! restarted. One piece of blocking work is bounded the same way by
//! [`crate::outside::blocking::run_with_deadline`].

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::clock::Clock;
use etcd_readiness_policy::sync::TolerantLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;
use tokio::task::JoinHandle;

/// First wait before a restart.
pub const MIN_BACKOFF: Duration = Duration::from_millis(100);
/// Longest wait before a restart (the backoff doubles up to this).
pub const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A task that ran this long before failing starts again from [`MIN_BACKOFF`].
pub const BACKOFF_RESET_AFTER: Duration = Duration::from_secs(60);

use crate::outside::blocking::panic_message;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct TaskLabels {
    task: String,
}

/// What `/livez?verbose` shows for one task.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskStatus {
    pub name: String,
    pub restarts: u64,
    /// The last failure: its message and when it happened.
    pub last_failure: Option<(String, Instant)>,
    /// Waiting out a backoff before the next start.
    pub restarting: bool,
}

#[derive(Debug, Default)]
struct Table {
    tasks: BTreeMap<String, TaskStatus>,
}

/// Runs tasks and restarts them when they fail. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Supervisor {
    table: Arc<Mutex<Table>>,
    restarts: Family<TaskLabels, Counter>,
    /// The runtime's clock: how long a task ran, when it failed.
    clock: Clock,
}

/// Aborts the supervised task when the supervisor's own task is aborted.
struct AbortOnDrop(JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

impl Supervisor {
    pub fn new(clock: Clock) -> Self {
        Supervisor {
            table: Default::default(),
            restarts: Default::default(),
            clock,
        }
    }

    /// Register `etcd_readiness_task_restarts_total{task}`.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "etcd_readiness_task_restarts",
            "Times a long-running task of the exporter failed (panicked or ended) and was restarted",
            self.restarts.clone(),
        );
    }

    /// Every supervised task, by name.
    pub fn tasks(&self) -> Vec<TaskStatus> {
        self.lock().tasks.values().cloned().collect()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.locked()
    }

    /// Run the task `make()` builds under the name `name`, restarting it with
    /// backoff whenever it panics or ends. Aborting the returned handle stops
    /// the supervisor and the task. Must be called within a tokio runtime.
    pub fn spawn<F, Fut>(&self, name: impl Into<String>, mut make: F) -> JoinHandle<()>
    where
        F: FnMut() -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let name = name.into();
        let me = self.clone();
        me.lock().tasks.insert(
            name.clone(),
            TaskStatus {
                name: name.clone(),
                restarts: 0,
                last_failure: None,
                restarting: false,
            },
        );
        tokio::spawn(async move {
            let mut backoff = MIN_BACKOFF;
            loop {
                let started = me.clock.now();
                let mut child = AbortOnDrop(tokio::spawn(make()));
                let failure = match (&mut child.0).await {
                    Ok(()) => "the task ended by itself".to_string(),
                    Err(e) if e.is_panic() => {
                        format!("panicked: {}", panic_message(e.into_panic().as_ref()))
                    }
                    // Cancelled: we are shutting down.
                    Err(_) => return,
                };
                let now = me.clock.now();
                if now.saturating_duration_since(started) >= BACKOFF_RESET_AFTER {
                    backoff = MIN_BACKOFF;
                }
                tracing::error!(
                    task = %name,
                    restart_in = ?backoff,
                    "task {name} failed ({failure}); restarting it"
                );
                me.restarts
                    .get_or_create(&TaskLabels { task: name.clone() })
                    .inc();
                if let Some(t) = me.lock().tasks.get_mut(&name) {
                    t.restarts += 1;
                    t.last_failure = Some((failure, now));
                    t.restarting = true;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                if let Some(t) = me.lock().tasks.get_mut(&name) {
                    t.restarting = false;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};

    #[tokio::test]
    async fn a_panicking_task_is_restarted_counted_and_shown() {
        let sup = Supervisor::new(Clock::node());
        let mut registry = Registry::default();
        sup.register(&mut registry);
        let runs = Arc::new(AtomicU32::new(0));
        let (tx, mut rx) = tokio::sync::mpsc::channel(1);
        let r = runs.clone();
        let handle = sup.spawn("sampler:test", move || {
            let n = r.fetch_add(1, Ordering::SeqCst);
            let tx = tx.clone();
            async move {
                if n < 2 {
                    panic!("absurd input {n}");
                }
                let _ = tx.send(()).await;
                std::future::pending::<()>().await;
            }
        });
        tokio::time::timeout(Duration::from_secs(10), rx.recv())
            .await
            .expect("the task runs again after two panics");
        assert_eq!(runs.load(Ordering::SeqCst), 3);
        let st = &sup.tasks()[0];
        assert_eq!(st.name, "sampler:test");
        assert_eq!(st.restarts, 2);
        assert_eq!(
            st.last_failure.as_ref().map(|f| f.0.as_str()),
            Some("panicked: absurd input 1")
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        assert!(
            text.contains("etcd_readiness_task_restarts_total{task=\"sampler:test\"} 2"),
            "{text}"
        );
        handle.abort();
    }

    #[tokio::test]
    async fn aborting_the_supervisor_stops_the_task() {
        let sup = Supervisor::new(Clock::node());
        let (tx, mut rx) = tokio::sync::mpsc::channel::<()>(1);
        let handle = sup.spawn("holder", move || {
            let tx = tx.clone();
            async move {
                let _ = tx.send(()).await;
                std::future::pending::<()>().await;
            }
        });
        // The task runs (and holds a sender) before we abort.
        assert_eq!(
            tokio::time::timeout(Duration::from_secs(10), rx.recv())
                .await
                .ok(),
            Some(Some(()))
        );
        handle.abort();
        // The channel closes only when the task (holding the sender) is dropped.
        let closed = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await;
        assert_eq!(closed.ok(), Some(None));
    }
}
