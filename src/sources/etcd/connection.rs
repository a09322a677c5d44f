//! The Watch stream that stands for the connection, what a loss of it does
//! to the store, and what every call's failure does ([`Shared::after`]).
//! The client and its login are the session's (`session.rs`).

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::api::{Call, Watch};
use super::{LABEL, Shared};
use crate::sources::{Reason, SampleError};
use etcd_readiness_policy::signals::Value;
use etcd_readiness_policy::sync::TolerantLock;

impl Shared {
    /// `r` of a call: a TLS failure has the files re-read and the next call
    /// build a new client; etcd's refusals for want of a user or a
    /// permission are explained.
    pub(super) fn after<T>(&self, mut r: Result<T, SampleError>) -> Result<T, SampleError> {
        if let (Err(e), Some(tls)) = (&r, &self.config.tls)
            && e.reason == Reason::Tls
        {
            self.tls_refused.store(true, Ordering::Relaxed);
            tls.refused(self.clock.now());
        }
        if let Err(e) = &mut r
            && let Some(hint) = crate::sources::etcd_auth::hint(&e.message, &self.who())
            && !e.message.contains(&hint)
        {
            e.message = format!("{} ({hint})", e.message);
        }
        r
    }

    /// The connection broke: every signal is unknown now, with `why`.
    pub(super) fn lost(&self, why: &str) {
        let why = self.config.endpoint.scrub(why);
        let at = self.clock.now();
        {
            let mut epoch = self.epoch.locked();
            *epoch += 1;
            let msg: Arc<str> = Arc::from(format!("connection to etcd lost: {why}"));
            for id in self.ids.all() {
                self.store.record_err(id, msg.clone(), at);
            }
            // The member cannot be reached: that is known, not unknown.
            self.store
                .record_ok(self.ids.etcd_up, Value::Bool(false), at);
        }
        self.metrics.error(LABEL, Reason::Connect);
        tracing::info!(endpoint = %self.config.endpoint, "connection to etcd lost: {why}");
        self.round_finished();
    }

    /// Open a watch on the probe key and wait for etcd's "created" answer.
    pub(super) async fn open_watch(&self) -> Result<Box<dyn Watch>, SampleError> {
        self.metrics.request(LABEL, "watch");
        if let Some(api) = &self.api {
            let opened = self.bounded("watch", api.watch()).await;
            return self.after(opened);
        }
        let key = self.config.probe_key.clone();
        let opened = self
            .bounded(
                "watch",
                Box::pin(self.with_session(|mut c| {
                    let key = key.clone();
                    async move { c.watch(key, None).await }
                })),
            )
            .await;
        let mut stream = self.after(opened)?;
        match self.bounded("watch", stream.message()).await? {
            Some(r) if r.created() => Ok(Box::new(stream)),
            _ => Err(SampleError::new(
                Reason::Rpc,
                "watch: the member did not create the watch",
            )),
        }
    }
}

impl Watch for etcd_client::WatchStream {
    fn ended(&mut self) -> Call<'_, ()> {
        Box::pin(async move {
            loop {
                match self.message().await {
                    Ok(Some(_)) => continue,
                    Ok(None) => return Ok(()),
                    Err(e) => return Err(e),
                }
            }
        })
    }
}
