//! The owner source: a DNS TXT lookup of `--owner.name`, as etcd-backup-restore
//! does it. owner_ok is true when the first TXT string equals `--owner.id`,
//! false when a TXT record exists and differs, and unknown on any lookup error
//! (timeout, NXDOMAIN, SERVFAIL, no record): only a confirmed mismatch is a
//! "no", because DNS trouble once turned into outages that way.
//!
//! The resolver's cache is cleared before every lookup, so a change of the
//! record is seen at the next round whatever its TTL.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use hickory_resolver::TokioResolver;
use hickory_resolver::config::{NameServerConfig, ResolveHosts, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::net::{DnsError, NetError};
use hickory_resolver::proto::op::ResponseCode;
use hickory_resolver::proto::rr::{Name, RData};

use super::{Pace, Reason, SampleError, Sampler};
use crate::outside::http_client::SourceError;
use crate::runtime::clock::Clock;
use etcd_readiness_policy::signals::{Builtin, Catalogue, SignalId, SignalStore, Source, Value};

/// Default `--owner.interval`.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(30);
/// Default `--owner.timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(5);

/// Validated settings of the owner check (from `--owner.*`).
#[derive(Clone, Debug)]
pub struct OwnerConfig {
    /// The DNS name whose TXT record names the owner.
    pub name: String,
    /// This cluster's id; the owner check passes when the record equals it.
    pub id: String,
    pub interval: Duration,
    pub timeout: Duration,
    /// Ask exactly this server (UDP, then TCP) with no search domains; `None`
    /// uses the system resolver configuration (/etc/resolv.conf).
    pub nameserver: Option<SocketAddr>,
}

/// Samples the DNS owner record.
pub struct OwnerSampler {
    cfg: OwnerConfig,
    name: Name,
    resolver: TokioResolver,
    ok: SignalId,
    latency: SignalId,
}

impl OwnerSampler {
    /// (`_catalogue` is unused: built-in ids are the same in every
    /// catalogue, [`Builtin`].)
    pub fn new(cfg: OwnerConfig, _catalogue: &Catalogue) -> Result<Self, SourceError> {
        if cfg.name.is_empty() || cfg.id.is_empty() {
            return Err(SourceError::Invalid(
                "the owner check needs both --owner.name and --owner.id".to_string(),
            ));
        }
        let mut name = Name::from_utf8(&cfg.name).map_err(|e| {
            SourceError::Invalid(format!(
                "--owner.name `{}` is not a DNS name: {e}",
                cfg.name
            ))
        })?;
        let provider = TokioRuntimeProvider::default();
        let mut builder = match cfg.nameserver {
            Some(addr) => {
                // An explicit server: the name is taken as fully qualified.
                name.set_fqdn(true);
                let mut ns = NameServerConfig::udp_and_tcp(addr.ip());
                for c in &mut ns.connections {
                    c.port = addr.port();
                }
                let config = ResolverConfig::from_parts(None, vec![], vec![ns]);
                let mut b = TokioResolver::builder_with_config(config, provider);
                b.options_mut().use_hosts_file = ResolveHosts::Never;
                b
            }
            None => TokioResolver::builder(provider).map_err(|e| {
                SourceError::Resolver(format!("reading the system configuration: {e}"))
            })?,
        };
        let opts: &mut ResolverOpts = builder.options_mut();
        opts.timeout = cfg.timeout;
        opts.attempts = 1;
        opts.try_tcp_on_error = true;
        let resolver = builder
            .build()
            .map_err(|e| SourceError::Resolver(e.to_string()))?;
        Ok(OwnerSampler {
            ok: Builtin::OwnerOk.id(),
            latency: Builtin::OwnerLookupMs.id(),
            cfg,
            name,
            resolver,
        })
    }

    /// One TXT lookup, bounded by the timeout: the first string of the first TXT record.
    pub async fn lookup(&self) -> Result<String, SampleError> {
        self.resolver.clear_cache();
        let name = &self.cfg.name;
        let res = tokio::time::timeout(
            self.cfg.timeout,
            self.resolver.txt_lookup(self.name.clone()),
        )
        .await;
        let lookup = match res {
            Err(_) => {
                return Err(SampleError {
                    reason: Reason::Timeout,
                    message: format!(
                        "TXT lookup of {name}: no answer within {:?}",
                        self.cfg.timeout
                    ),
                });
            }
            Ok(Err(e)) => return Err(classify(name, &e)),
            Ok(Ok(l)) => l,
        };
        let first = lookup.answers().iter().find_map(|r| match &r.data {
            RData::TXT(txt) => Some(
                txt.txt_data
                    .first()
                    .map(|s| String::from_utf8_lossy(s).into_owned())
                    .unwrap_or_default(),
            ),
            _ => None,
        });
        first.ok_or_else(|| SampleError {
            reason: Reason::Dns,
            message: format!("TXT lookup of {name}: no TXT record in the answer"),
        })
    }
}

fn classify(name: &str, e: &NetError) -> SampleError {
    let reason = match e {
        NetError::Timeout => Reason::Timeout,
        NetError::Dns(DnsError::NoRecordsFound(nr))
            if nr.response_code == ResponseCode::NXDomain =>
        {
            Reason::Nxdomain
        }
        NetError::Dns(DnsError::ResponseCode(ResponseCode::ServFail)) => Reason::Servfail,
        NetError::Dns(DnsError::NoRecordsFound(nr))
            if nr.response_code == ResponseCode::ServFail =>
        {
            Reason::Servfail
        }
        _ => Reason::Dns,
    };
    let message = match (reason, e) {
        (Reason::Nxdomain, _) => {
            format!("TXT lookup of {name}: NXDOMAIN (the name does not exist)")
        }
        (_, NetError::Dns(DnsError::NoRecordsFound(_))) => {
            format!("TXT lookup of {name}: no TXT record")
        }
        _ => format!("TXT lookup of {name}: {e}"),
    };
    SampleError { reason, message }
}

impl Sampler for OwnerSampler {
    fn pace(&self) -> Pace {
        Pace {
            source: Source::Owner,
            interval: self.cfg.interval,
            timeout: self.cfg.timeout,
        }
    }

    fn signals(&self) -> Vec<SignalId> {
        vec![self.ok, self.latency]
    }

    async fn sample(&mut self, store: &SignalStore, clock: &Clock) -> Result<(), SampleError> {
        let started = clock.now();
        let res = self.lookup().await;
        let at = clock.now();
        let ms = at.duration_since(started).as_secs_f64() * 1000.0;
        match res {
            Ok(txt) => {
                // A mismatch is a good sample whose value is false, not a failed round.
                store.record_ok(self.latency, Value::Num(ms), at);
                store.record_ok(self.ok, Value::Bool(txt == self.cfg.id), at);
                Ok(())
            }
            Err(e) => {
                let msg: Arc<str> = Arc::from(e.message.as_str());
                if e.reason == Reason::Timeout {
                    store.record_err(self.latency, msg.clone(), at);
                } else {
                    // The server answered (with an error): that answer's latency is still known.
                    store.record_ok(self.latency, Value::Num(ms), at);
                }
                store.record_err(self.ok, msg, at);
                Err(e)
            }
        }
    }
}
