//! The one gRPC client of this member ([`Shared::client`]: made once, TLS
//! from the flags' files, kept after errors as tonic reconnects by itself),
//! the Watch stream that stands for the connection, and what a loss of it
//! does to the store.

use std::sync::Arc;

use etcd_client::{Certificate, Client, ConnectOptions, Identity, TlsOptions};

use super::{LABEL, Shared};
use crate::signals::Value;
use crate::sources::{Reason, SampleError};

impl Shared {
    pub(super) async fn client(&self) -> Result<Client, SampleError> {
        let mut slot = self.client.lock().await;
        if let Some(c) = &*slot {
            return Ok(c.clone());
        }
        let cfg = &self.config;
        // The client's own request timeout leaves room for the contention
        // credit: the call's own deadline decides when it has taken too long.
        let mut opts = ConnectOptions::new()
            .with_timeout(cfg.client_timeout())
            .with_connect_timeout(cfg.client_timeout());
        if let Some(tls) = &cfg.tls {
            let mut t = TlsOptions::new().ca_certificate(Certificate::from_pem(&tls.ca));
            if let Some((cert, key)) = &tls.identity {
                t = t.identity(Identity::from_pem(cert, key));
            }
            opts = opts.with_tls(t);
        }
        let endpoint = cfg.endpoint.clone();
        let client = self
            // Boxed: tonic's connect future is large, and every future that
            // may connect (all of them) would carry it inline.
            .bounded(
                "connect",
                Box::pin(async move { Client::connect([endpoint], Some(opts)).await }),
            )
            .await?;
        // Keep the client even after errors: tonic reconnects by itself, and
        // a fresh client would not help a member that does not answer.
        *slot = Some(client.clone());
        Ok(client)
    }

    /// The connection broke: every signal is unknown now, with `why`.
    pub(super) fn lost(&self, why: &str) {
        let at = self.clock.now();
        {
            let mut epoch = self.epoch.lock().unwrap_or_else(|e| e.into_inner());
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
        tracing::info!(endpoint = %crate::sources::client::redact_credentials(&self.config.endpoint), "connection to etcd lost: {why}");
        self.round_finished();
    }

    /// Open a watch on the probe key and wait for etcd's "created" answer.
    pub(super) async fn open_watch(&self) -> Result<etcd_client::WatchStream, SampleError> {
        let cfg = &self.config;
        let mut c = self.client().await?;
        let key = cfg.probe_key.clone();
        self.metrics.request(LABEL, "watch");
        let mut stream = self
            .bounded("watch", async move { c.watch(key, None).await })
            .await?;
        match self.bounded("watch", stream.message()).await? {
            Some(r) if r.created() => Ok(stream),
            _ => Err(SampleError::new(
                Reason::Rpc,
                "watch: the member did not create the watch",
            )),
        }
    }
}
