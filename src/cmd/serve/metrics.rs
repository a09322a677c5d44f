//! Every metric family `serve` exports, registered explicitly, each by the
//! component that owns it, before the registry is frozen. A followed file's
//! families are registered when the [`Wiring`] follows it.

use std::sync::Arc;

use prometheus_client::registry::Registry;

use super::graph::{Followed, Wiring};
use crate::engine::{CandidateMetrics, EngineMetrics};
use crate::http::HttpMetrics;
use crate::reload::{ReloadMetrics, ReloadStatus};
use crate::runtime::Runtime;
use crate::sources::SourceMetrics;
use crate::sources::tls_material::{TlsKind, TlsMetrics};
use crate::web::WebMetrics;

/// Every metric family `serve` exports, registered explicitly (each
/// component registers its own) before the registry is frozen.
pub(super) struct Metrics {
    pub(super) engine: EngineMetrics,
    pub(super) sources: SourceMetrics,
    pub(super) http: HttpMetrics,
    pub(super) etcd: crate::sources::etcd::Families,
    pub(super) files: FileMetrics,
}

/// The families of the reloaded files (each with its reload status).
pub(super) struct FileMetrics {
    pub(super) policy: ReloadMetrics,
    pub(super) candidate: Option<(ReloadMetrics, CandidateMetrics)>,
    pub(super) web: Option<WebMetrics>,
    pub(super) scrape: Option<ReloadStatus>,
    /// The sources' TLS files: problems and validity, and each set's
    /// reload status.
    pub(super) tls: TlsMetrics,
    pub(super) etcd_tls: Option<ReloadStatus>,
    pub(super) backup_tls: Option<ReloadStatus>,
    pub(super) etcd_password: Option<ReloadStatus>,
}

/// The families of everything `wiring` runs, then `extend`'s.
pub(super) fn register_metrics(
    wiring: &Wiring,
    runtime: &Runtime,
    extend: impl FnOnce(&mut Registry),
) -> (Metrics, Arc<Registry>) {
    let mut registry = Registry::default();
    let r = &mut registry;
    let follows = |is: fn(&Followed) -> bool| wiring.files.iter().any(is);
    let metrics = Metrics {
        engine: EngineMetrics::register(r),
        sources: SourceMetrics::register(r),
        http: HttpMetrics::register(r),
        etcd: crate::sources::etcd::Families::register(r),
        files: FileMetrics {
            policy: ReloadMetrics::register(r),
            candidate: follows(|f| matches!(f, Followed::Candidate(_))).then(|| {
                (
                    ReloadMetrics::register_candidate(r),
                    CandidateMetrics::register(r),
                )
            }),
            web: follows(|f| matches!(f, Followed::Web(_))).then(|| WebMetrics::register(r)),
            scrape: follows(|f| matches!(f, Followed::ScrapeConfig(..)))
                .then(|| crate::sources::scrape_set::register_status(r)),
            tls: TlsMetrics::register(r),
            etcd_tls: follows(|f| matches!(f, Followed::EtcdTls(_)))
                .then(|| crate::sources::tls_material::register_status(r, TlsKind::Etcd)),
            etcd_password: follows(|f| matches!(f, Followed::EtcdPassword(_)))
                .then(|| crate::sources::etcd_auth::register_status(r)),
            backup_tls: follows(|f| matches!(f, Followed::BackupTls(_)))
                .then(|| crate::sources::tls_material::register_status(r, TlsKind::Backup)),
        },
    };
    runtime.supervisor.register(r);
    crate::metrics::process::register(r, runtime.clock.wall());
    extend(r);
    (metrics, Arc::new(registry))
}
