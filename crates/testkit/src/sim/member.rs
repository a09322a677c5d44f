//! What a test sees of one simulated member besides the verdict:
//! [`Logged`], a [`MemberApi`] that passes every call to the member and
//! logs the linearizable reads the exporter sends (when, and when and how
//! each ended: answered, failed, or given up).

use std::sync::{Arc, Mutex};

use etcd_readiness_exporter::sources::etcd::api::{Call, MemberApi, MemberStatus, Watch};
use etcd_readiness_policy::sync::TolerantLock;
use tokio::time::Instant;

/// One linearizable read sent to the member.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Read {
    pub sent: Instant,
    /// When it ended and whether it was answered (`None`: still in flight,
    /// or given up by the exporter: a resend or its deadline dropped it).
    pub ended: Option<(Instant, bool)>,
}

/// A member whose linearizable reads are logged.
pub struct Logged {
    inner: Arc<dyn MemberApi>,
    reads: Arc<Mutex<Vec<Read>>>,
}

impl Logged {
    /// `inner`, its reads logged; the log to read them back.
    pub fn new(inner: Arc<dyn MemberApi>) -> (Arc<Logged>, ReadLog) {
        let reads = Arc::new(Mutex::new(Vec::new()));
        let log = ReadLog(reads.clone());
        (Arc::new(Logged { inner, reads }), log)
    }
}

/// The reads a [`Logged`] member saw, readable while it runs.
#[derive(Clone, Debug)]
pub struct ReadLog(Arc<Mutex<Vec<Read>>>);

impl ReadLog {
    pub fn reads(&self) -> Vec<Read> {
        self.0.locked().clone()
    }
}

impl MemberApi for Logged {
    fn status(&self) -> Call<'_, MemberStatus> {
        self.inner.status()
    }

    fn range(&self, serializable: bool) -> Call<'_, ()> {
        if serializable {
            return self.inner.range(true);
        }
        Box::pin(async move {
            let k = {
                let mut reads = self.reads.locked();
                reads.push(Read {
                    sent: Instant::now(),
                    ended: None,
                });
                reads.len() - 1
            };
            let r = self.inner.range(false).await;
            self.reads.locked()[k].ended = Some((Instant::now(), r.is_ok()));
            r
        })
    }

    fn watch(&self) -> Call<'_, Box<dyn Watch>> {
        self.inner.watch()
    }
}
