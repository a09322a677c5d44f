//! The kubelet's readiness worker for one member, on virtual time, as
//! benches/kubelet_prober.py has it: one probe at a time on a Go ticker of
//! `periodSeconds` (a tick missed while a probe ran fires at once, the
//! others are dropped), `timeoutSeconds` as the whole probe's deadline, the
//! thresholds, readiness starting as Failure. Each probe asks the real
//! engine's verdict with the real long-poll rule of the probe listener
//! ([`Holds`]: held only while this client already has the answer, woken
//! by the engine's change generation); the HTTP layer itself is not run.
//! The stanza is the shipped one, read from the deploy files.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use etcd_readiness_exporter::engine::EngineHandle;
use etcd_readiness_exporter::http::longpoll::{Holds, LongPollMetrics};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// The shipped readinessProbe of the etcd container.
pub const SHIPPED_PROBE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../deploy/kustomize/components/sidecar/etcd-probe.yaml"
);

/// Why a stanza could not be read.
#[derive(Debug, thiserror::Error)]
pub enum StanzaError {
    #[error("{path}: {error}")]
    Read { path: String, error: std::io::Error },
    #[error("{path}: no {field} in the readinessProbe")]
    Missing { path: String, field: &'static str },
    #[error("{path}: {field} {value:?} is not a number of seconds")]
    Bad {
        path: String,
        field: &'static str,
        value: String,
    },
}

/// A readinessProbe: `?wait=` of its path, period, timeout, thresholds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Stanza {
    pub wait: Option<Duration>,
    pub period: Duration,
    pub timeout: Duration,
    pub success: u32,
    pub failure: u32,
}

impl Stanza {
    /// The stanza of `path` (a kustomize patch with one `readinessProbe`).
    pub fn read(path: &str) -> Result<Stanza, StanzaError> {
        let text = std::fs::read_to_string(path).map_err(|error| StanzaError::Read {
            path: path.into(),
            error,
        })?;
        let probe = text.split("readinessProbe:").nth(1).unwrap_or("");
        let field = |name: &'static str| {
            probe
                .lines()
                .find_map(|l| l.trim().strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_string())
                .ok_or(StanzaError::Missing {
                    path: path.into(),
                    field: name,
                })
        };
        let num = |name: &'static str| -> Result<u64, StanzaError> {
            let v = field(name)?;
            v.parse().map_err(|_| StanzaError::Bad {
                path: path.into(),
                field: name,
                value: v,
            })
        };
        let query = field("path")?;
        let wait = query
            .split_once("wait=")
            .map(|(_, w)| w.split('&').next().unwrap_or(""))
            .map(|w| {
                let secs = w.strip_suffix('s').and_then(|n| n.parse::<u64>().ok());
                secs.map(Duration::from_secs).ok_or(StanzaError::Bad {
                    path: path.into(),
                    field: "path's wait",
                    value: w.into(),
                })
            })
            .transpose()?;
        Ok(Stanza {
            wait,
            period: Duration::from_secs(num("periodSeconds")?),
            timeout: Duration::from_secs(num("timeoutSeconds")?),
            success: num("successThreshold")? as u32,
            failure: num("failureThreshold")? as u32,
        })
    }
}

/// The Ready condition one worker derives, readable at any instant.
#[derive(Clone, Default)]
pub struct Ready(Arc<AtomicBool>);

impl Ready {
    pub fn get(&self) -> bool {
        self.0.load(Ordering::Acquire)
    }
}

/// One probe: the verdict now, or held by the long-poll rule until it
/// changes or the wait runs out. Whether it says ready.
async fn probe(engine: &EngineHandle, holds: &Arc<Holds>, stanza: &Stanza) -> bool {
    let key = holds.key(
        Some(IpAddr::V4(Ipv4Addr::LOCALHOST)),
        "/readyz",
        "wait",
        false,
    );
    let ready = engine.verdict().verdict.ready;
    let now = Instant::now().into_std();
    let Some(wait) = stanza.wait else {
        return ready;
    };
    let answer = match holds.admit(key, ready, wait, now) {
        Err(_) => ready,
        Ok(_held) => {
            let mut changes = engine.changes();
            let until = Instant::now() + wait;
            for _ in 0..100_000 {
                tokio::select! {
                    biased;
                    r = changes.changed() => if r.is_err() { break },
                    _ = tokio::time::sleep_until(until) => break,
                }
                if engine.verdict().verdict.ready != ready {
                    break;
                }
            }
            // Changed, or the wait ran out: what it would answer at once.
            engine.verdict().verdict.ready
        }
    };
    holds.answered(key, answer, Instant::now().into_std());
    answer
}

/// Run the worker from `start` (its ticker's origin) until aborted.
pub async fn worker(engine: EngineHandle, stanza: Stanza, start: Instant, ready: Ready) {
    let mut registry = prometheus_client::registry::Registry::default();
    let metrics = LongPollMetrics::register(&mut registry);
    let holds = Holds::new("probe", 4, CancellationToken::new(), metrics);
    tokio::time::sleep_until(start).await;
    let (mut seen, mut last, mut run) = (start, None, 0u32);
    for _ in 0..10_000_000u64 {
        let ok = tokio::time::timeout(stanza.timeout, probe(&engine, &holds, &stanza))
            .await
            .unwrap_or(false);
        let done = Instant::now();
        if last == Some(ok) {
            run += 1;
        } else {
            (last, run) = (Some(ok), 1);
        }
        let threshold = if ok { stanza.success } else { stanza.failure };
        if run >= threshold {
            ready.0.store(ok, Ordering::Release);
        }
        // The Go ticker: at once if a tick fired meanwhile, else the next.
        let k = (done - start).as_nanos() / stanza.period.as_nanos();
        let latest = start + stanza.period * k as u32;
        let next = if latest > seen {
            seen = latest;
            done
        } else {
            seen += stanza.period;
            seen
        };
        tokio::time::sleep_until(next).await;
    }
}
