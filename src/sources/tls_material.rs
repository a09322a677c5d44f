//! TLS credentials that rotate: the CA bundle, client certificate and key
//! a source talks with (`--etcd.cacert/cert/key`, also an `https://`
//! `--etcd.metrics-url`'s, and `--backup.cacert/cert/key`), read and checked
//! as one [`Material`], held by a [`Credentials`] handle the sources share
//! and kept current by the one reloader, [`LastGood`] of [`CredentialFiles`]
//! (inotify on the files' directories, `..data` swaps included, SIGHUP, the
//! periodic re-read, and a re-read asked for when a handshake is refused).
//!
//! A new material is used for the next connection: each material carries a
//! generation, and a source rebuilds its client when the generation it was
//! built with is not the current one ([`HttpClient`] for the HTTP sources;
//! the etcd source's `client()`). A pair that does not parse, or whose
//! certificate does not match its key (a half-written pair), fails the
//! reload and the last good material stays. A certificate that expired, is
//! not yet valid or expires soon ([`problem_at`]) is logged and counted in
//! `etcd_readiness_tls_certificate_problems_total` when it is first seen.
//! `--config`'s scrape sources read their TLS files through
//! [`Material::read`] too, reloaded with their file (`scrape_set.rs`).

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use etcd_readiness_policy::sync::TolerantLock;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use sha2::{Digest, Sha256};
use tokio::sync::Notify;

use super::{Reason, SampleError};
use crate::outside::bounded_read::read_bounded;
use crate::outside::certificate::Validity;
pub use crate::outside::http_client::{CannotStart, MaterialError};
use crate::outside::http_client::{SourceError, TlsFiles};
use crate::reload::{Change, LastGood, Load, Names, ReloadStatus};
use crate::runtime::clock::Clock;

/// A TLS file that cannot be used is a refused reload like any other,
/// logged against the file it is about.
impl crate::reload::Problem for crate::outside::http_client::MaterialError {
    fn file(&self) -> Option<&Path> {
        MaterialError::file(self)
    }
}

/// The largest PEM file read (a CA bundle of a few hundred certificates).
pub const MAX_PEM_BYTES: u64 = 1024 * 1024;

/// A certificate counts as expiring soon in the last tenth of its lifetime,
/// at most this long before its notAfter (cert-manager renews a third
/// before: a certificate this close to its end missed its renewal).
pub const EXPIRES_SOON_MAX: Duration = Duration::from_secs(7 * 24 * 3600);

/// The least time between two re-reads asked for by refused handshakes.
const RECHECK_GAP: Duration = Duration::from_secs(1);

/// Which files a set of credentials is: a typed identity for metrics,
/// logs and the watcher's task name.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TlsKind {
    /// `--etcd.cacert`, `--etcd.cert`, `--etcd.key`.
    Etcd,
    /// `--backup.cacert`, `--backup.cert`, `--backup.key`.
    Backup,
}

impl TlsKind {
    /// The `files` label.
    pub fn label(self) -> &'static str {
        match self {
            TlsKind::Etcd => "etcd",
            TlsKind::Backup => "backup",
        }
    }

    /// The flags that name the files.
    pub fn flags(self) -> &'static str {
        match self {
            TlsKind::Etcd => "--etcd.cacert/--etcd.cert/--etcd.key",
            TlsKind::Backup => "--backup.cacert/--backup.cert/--backup.key",
        }
    }

    /// The supervised watcher's task name.
    pub fn watcher(self) -> &'static str {
        match self {
            TlsKind::Etcd => "etcd-tls-watcher",
            TlsKind::Backup => "backup-tls-watcher",
        }
    }

    fn names(self) -> Names {
        match self {
            TlsKind::Etcd => Names {
                what: "etcd TLS",
                kept: "the previous etcd certificates stay in use",
            },
            TlsKind::Backup => Names {
                what: "backup TLS",
                kept: "the previous backup sidecar certificates stay in use",
            },
        }
    }
}

/// A checked set of TLS files: PEM bytes as read, what they say, and the
/// generation of the [`Credentials`] that hold it.
#[derive(Clone, Debug)]
pub struct Material {
    /// The CA bundle (at least one certificate).
    pub ca: Option<Vec<u8>>,
    /// The client certificate chain and its key, which match.
    pub identity: Option<(Vec<u8>, Vec<u8>)>,
    /// The client certificate's validity.
    pub client_validity: Option<Validity>,
    /// The validity of the CA bundle's certificate that ends first.
    pub ca_validity: Option<Validity>,
    /// SHA-256 of every file's bytes, in order.
    pub sha256: String,
    /// Bumped by every change put in force; 0 for material not held.
    pub generation: u64,
}

/// A PEM file read: its path and bytes.
type Read = (PathBuf, Vec<u8>);

impl Material {
    /// Read and check `files`: each bounded, regular files only.
    pub fn read(files: &TlsFiles) -> Result<Material, MaterialError> {
        let pair = crate::outside::http_client::cert_key_pair(
            files.cert.as_ref(),
            files.key.as_ref(),
            "a client certificate and its key",
        )
        .map_err(MaterialError::Pair)?;
        let ca = files.ca.as_ref().map(|p| read_pem(p, "CA")).transpose()?;
        let identity = match pair {
            None => None,
            Some((c, k)) => Some((
                read_pem(c, "client certificate")?,
                read_pem(k, "client key")?,
            )),
        };
        Material::check(ca, identity)
    }

    /// Parse and check what was read (pure): the CA bundle holds
    /// certificates, the chain parses, the key is one rustls can use and
    /// matches the chain's first certificate.
    pub fn check(
        ca: Option<Read>,
        identity: Option<(Read, Read)>,
    ) -> Result<Material, MaterialError> {
        let mut sha = Sha256::new();
        let mut ca_validity = None;
        if let Some((path, pem)) = &ca {
            sha.update(b"ca\0");
            sha.update(pem);
            for v in certificates(path, pem, "CA")?
                .iter()
                .map(|c| validity(path, c, "CA"))
            {
                let v = v?;
                if ca_validity.is_none_or(|e: Validity| v.not_after < e.not_after) {
                    ca_validity = Some(v);
                }
            }
        }
        let mut client_validity = None;
        if let Some(((cert_path, cert), (key_path, key))) = &identity {
            sha.update(b"cert\0");
            sha.update(cert);
            sha.update(b"key\0");
            sha.update(key);
            let chain = certificates(cert_path, cert, "client certificate")?;
            client_validity = Some(validity(cert_path, &chain[0], "client certificate")?);
            check_pair(chain, (cert_path, key_path), key)?;
        }
        Ok(Material {
            ca: ca.map(|(_, b)| b),
            identity: identity.map(|((_, c), (_, k))| (c, k)),
            client_validity,
            ca_validity,
            sha256: hex::encode(sha.finalize()),
            generation: 0,
        })
    }

    /// What is wrong with its certificates at `now` (Unix seconds), the
    /// client certificate's first.
    pub fn problems(&self, now: i64) -> Vec<(&'static str, CertProblem)> {
        [("client", self.client_validity), ("ca", self.ca_validity)]
            .into_iter()
            .filter_map(|(which, v)| Some((which, problem_at(v?, now)?)))
            .collect()
    }
}

fn read_pem(path: &Path, what: &'static str) -> Result<Read, MaterialError> {
    read_bounded(path, MAX_PEM_BYTES)
        .map(|b| (path.to_path_buf(), b))
        .map_err(|source| MaterialError::Read {
            what,
            path: path.to_path_buf(),
            source,
        })
}

fn invalid(what: &'static str, path: &Path, problem: impl Into<String>) -> MaterialError {
    MaterialError::Invalid {
        what,
        path: path.to_path_buf(),
        problem: problem.into(),
    }
}

fn certificates(
    path: &Path,
    pem: &[u8],
    what: &'static str,
) -> Result<Vec<CertificateDer<'static>>, MaterialError> {
    let certs: Vec<_> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|e| invalid(what, path, format!("is not PEM: {e}")))?;
    if certs.is_empty() {
        return Err(invalid(what, path, "holds no PEM certificate"));
    }
    Ok(certs)
}

fn validity(
    path: &Path,
    der: &CertificateDer<'_>,
    what: &'static str,
) -> Result<Validity, MaterialError> {
    Validity::of(der).ok_or_else(|| invalid(what, path, "holds a certificate that does not parse"))
}

/// The key parses, rustls can sign with it, and it is the certificate's.
fn check_pair(
    chain: Vec<CertificateDer<'static>>,
    (cert_path, key_path): (&Path, &Path),
    key: &[u8],
) -> Result<(), MaterialError> {
    let what = "client key";
    let der = PrivateKeyDer::from_pem_slice(key).map_err(|e| {
        invalid(
            what,
            key_path,
            format!("holds no usable PEM private key: {e}"),
        )
    })?;
    let signer = rustls::crypto::ring::sign::any_supported_type(&der).map_err(|e| {
        invalid(
            what,
            key_path,
            format!("holds a key rustls cannot use: {e}"),
        )
    })?;
    match rustls::sign::CertifiedKey::new(chain, signer).keys_match() {
        Err(rustls::Error::InconsistentKeys(rustls::InconsistentKeys::KeyMismatch)) => {
            Err(MaterialError::KeyMismatch {
                cert: cert_path.to_path_buf(),
                key: key_path.to_path_buf(),
            })
        }
        // A key whose public half cannot be derived is checked by the handshake.
        _ => Ok(()),
    }
}

/// What is wrong with a certificate at a given time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CertProblem {
    Expired {
        not_after: i64,
    },
    NotYetValid {
        not_before: i64,
    },
    /// In the last tenth of its lifetime, at most [`EXPIRES_SOON_MAX`].
    ExpiresSoon {
        not_after: i64,
    },
}

impl CertProblem {
    /// The `problem` label.
    pub fn label(self) -> &'static str {
        match self {
            CertProblem::Expired { .. } => "expired",
            CertProblem::NotYetValid { .. } => "not_yet_valid",
            CertProblem::ExpiresSoon { .. } => "expires_soon",
        }
    }
}

impl std::fmt::Display for CertProblem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let at = |t: i64| crate::outside::checked::rfc3339(t.saturating_mul(1000));
        match *self {
            CertProblem::Expired { not_after } => {
                write!(f, "expired at {} (notAfter)", at(not_after))
            }
            CertProblem::NotYetValid { not_before } => {
                write!(f, "is not valid before {} (notBefore)", at(not_before))
            }
            CertProblem::ExpiresSoon { not_after } => {
                write!(f, "expires soon, at {} (notAfter): renew it", at(not_after))
            }
        }
    }
}

/// What is wrong with a certificate valid `v` at `now` (Unix seconds), if
/// anything (pure).
pub fn problem_at(v: Validity, now: i64) -> Option<CertProblem> {
    if now > v.not_after {
        return Some(CertProblem::Expired {
            not_after: v.not_after,
        });
    }
    if now < v.not_before {
        return Some(CertProblem::NotYetValid {
            not_before: v.not_before,
        });
    }
    let lifetime = v.not_after.saturating_sub(v.not_before);
    let margin = (lifetime / 10).min(EXPIRES_SOON_MAX.as_secs() as i64);
    (v.not_after.saturating_sub(now) <= margin).then_some(CertProblem::ExpiresSoon {
        not_after: v.not_after,
    })
}

/// `wall` in Unix seconds (0 before the epoch).
fn unix_secs(wall: SystemTime) -> i64 {
    wall.duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_secs()).unwrap_or(i64::MAX))
}

/// The material a source talks with, shared by the sources that use the
/// same files and by their reloader. Cheap to clone.
#[derive(Clone, Debug)]
pub struct Credentials(Arc<Held>);

#[derive(Debug)]
struct Held {
    kind: TlsKind,
    files: TlsFiles,
    current: ArcSwap<Material>,
    /// A handshake was refused: the watcher re-reads the files now.
    recheck: Arc<Notify>,
    last_recheck: Mutex<Option<Instant>>,
}

impl Credentials {
    /// Read and check `files` now, at start-up: a problem is an error the
    /// exporter does not start with.
    pub fn load(kind: TlsKind, files: &TlsFiles) -> Result<Credentials, CannotStart> {
        let mut material = Material::read(files).map_err(|error| CannotStart {
            flags: kind.flags(),
            error,
        })?;
        material.generation = 1;
        Ok(Credentials(Arc::new(Held {
            kind,
            files: files.clone(),
            current: ArcSwap::from_pointee(material),
            recheck: Arc::new(Notify::new()),
            last_recheck: Mutex::new(None),
        })))
    }

    pub fn kind(&self) -> TlsKind {
        self.0.kind
    }

    pub fn files(&self) -> &TlsFiles {
        &self.0.files
    }

    /// The material for the next connection.
    pub fn current(&self) -> Arc<Material> {
        self.0.current.load_full()
    }

    /// What the watcher waits on besides its files (refused handshakes).
    pub fn recheck(&self) -> Arc<Notify> {
        self.0.recheck.clone()
    }

    /// A handshake with this material was refused at `now`: have the files
    /// re-read now (at most once a second), in case they changed unseen.
    pub fn refused(&self, now: Instant) {
        let mut last = self.0.last_recheck.locked();
        if last.is_none_or(|t| now.saturating_duration_since(t) >= RECHECK_GAP) {
            *last = Some(now);
            self.0.recheck.notify_one();
        }
    }

    fn put(&self, mut material: Material) -> u64 {
        let generation = self.current().generation + 1;
        material.generation = generation;
        self.0.current.store(Arc::new(material));
        generation
    }
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ProblemLabels {
    files: &'static str,
    certificate: &'static str,
    problem: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct CertLabels {
    files: &'static str,
    certificate: &'static str,
}

/// `etcd_readiness_tls_certificate_*`: problems seen, and when the
/// certificates in use end. Cheap to clone.
#[derive(Clone, Debug, Default)]
pub struct TlsMetrics {
    problems: Family<ProblemLabels, Counter>,
    not_after: Family<CertLabels, Gauge>,
}

impl TlsMetrics {
    pub fn register(registry: &mut Registry) -> TlsMetrics {
        let m = TlsMetrics::default();
        registry.register(
            "etcd_readiness_tls_certificate_problems",
            "Problems seen with a source's TLS files, counted when first seen: expires_soon, expired, not_yet_valid (by certificate: client, ca), key_mismatch (a client certificate that does not match its key: not used, the last good pair stays)",
            m.problems.clone(),
        );
        registry.register(
            "etcd_readiness_tls_certificate_not_after_seconds",
            "notAfter of the certificates a source uses (client; ca: the bundle's first to end), Unix seconds: alert on it minus time() below a margin",
            m.not_after.clone(),
        );
        m
    }

    fn count(&self, kind: TlsKind, certificate: &'static str, problem: &'static str) {
        self.problems
            .get_or_create(&ProblemLabels {
                files: kind.label(),
                certificate,
                problem,
            })
            .inc();
    }

    /// Problems counted for `kind`'s files (all certificates).
    pub fn problems(&self, kind: TlsKind, problem: &'static str) -> u64 {
        ["client", "ca"]
            .into_iter()
            .map(|certificate| {
                self.problems
                    .get_or_create(&ProblemLabels {
                        files: kind.label(),
                        certificate,
                        problem,
                    })
                    .get()
            })
            .sum()
    }

    fn in_use(&self, kind: TlsKind, m: &Material) {
        for (certificate, v) in [("client", m.client_validity), ("ca", m.ca_validity)] {
            if let Some(v) = v {
                self.not_after
                    .get_or_create(&CertLabels {
                        files: kind.label(),
                        certificate,
                    })
                    .set(v.not_after);
            }
        }
    }
}

/// A set of TLS files as a [`Load`]: its reloader re-reads every file each
/// time (their combined hash is the identity), puts a changed, good
/// material in force, and notes certificate problems when first seen.
#[derive(Debug)]
pub struct CredentialFiles {
    creds: Credentials,
    status: ReloadStatus,
    metrics: TlsMetrics,
    /// Certificates are checked against its wall time.
    clock: Clock,
    /// The problems last noted (with the material's hash), so each is
    /// logged and counted once.
    noted: Mutex<Vec<(String, &'static str, &'static str)>>,
}

/// The reloader of one set of TLS files.
pub type CredentialsReloader = LastGood<CredentialFiles>;

impl CredentialFiles {
    /// The reloader of `creds`' files: the first of certificate, CA, key
    /// is the file it reads first, the others are read by the build.
    pub fn reloader(
        creds: Credentials,
        status: ReloadStatus,
        metrics: TlsMetrics,
        clock: Clock,
    ) -> Arc<CredentialsReloader> {
        let files = creds.files();
        let first = [&files.cert, &files.ca, &files.key]
            .into_iter()
            .flatten()
            .next()
            .cloned()
            .unwrap_or_default();
        let material = creds.current();
        let loader = CredentialFiles {
            creds: creds.clone(),
            status,
            metrics,
            clock,
            noted: Mutex::new(Vec::new()),
        };
        loader.metrics.in_use(creds.kind(), &material);
        loader.note(&material, unix_secs(loader.clock.wall()));
        let names = creds.kind().names();
        let clock = loader.clock.clone();
        Arc::new(LastGood::new(
            first,
            names,
            loader,
            Some(material.sha256.clone()),
            clock,
        ))
    }

    /// Log and count the problems of `m` at `now` not noted yet for it.
    fn note(&self, m: &Material, now: i64) {
        let kind = self.creds.kind();
        let mut noted = self.noted.locked();
        let mut seen = Vec::new();
        for (certificate, problem) in m.problems(now) {
            let key = (m.sha256.clone(), certificate, problem.label());
            if !noted.contains(&key) {
                tracing::warn!(
                    files = kind.label(),
                    "the {certificate} certificate of the {} {problem}",
                    kind.names().what
                );
                self.metrics.count(kind, certificate, problem.label());
            }
            seen.push(key);
        }
        *noted = seen;
    }

    fn note_mismatch(&self, e: &MaterialError, sha: String) {
        let key = (sha, "client", "key_mismatch");
        let mut noted = self.noted.locked();
        if !noted.contains(&key) {
            // The reloader logs the failure itself.
            tracing::debug!(error = %e, "a client certificate that does not match its key");
            self.metrics
                .count(self.creds.kind(), "client", "key_mismatch");
            noted.push(key);
        }
    }
}

impl Load for CredentialFiles {
    type Value = Material;
    type Error = MaterialError;

    fn limit(&self) -> u64 {
        MAX_PEM_BYTES
    }

    fn build(&self, _path: &Path, _text: String) -> Result<Material, MaterialError> {
        // Every file is read again here, so that what is hashed is what is
        // parsed (the first one too: a pair is swapped between two reads).
        match Material::read(self.creds.files()) {
            Ok(m) => {
                self.note(&m, unix_secs(self.clock.wall()));
                Ok(m)
            }
            Err(e @ MaterialError::KeyMismatch { .. }) => {
                let files = self.creds.files();
                let mut sha = Sha256::new();
                for p in [&files.cert, &files.key].into_iter().flatten() {
                    sha.update(read_bounded(p, MAX_PEM_BYTES).unwrap_or_default());
                }
                self.note_mismatch(&e, hex::encode(sha.finalize()));
                Err(e)
            }
            Err(e) => Err(e),
        }
    }

    fn identity(&self, value: &Material) -> Option<String> {
        Some(value.sha256.clone())
    }

    fn reads_other_files(&self) -> bool {
        true
    }

    fn apply(&self, value: Material, _change: &Change<'_>) -> Result<String, MaterialError> {
        self.metrics.in_use(self.creds.kind(), &value);
        let generation = self.creds.put(value);
        Ok(format!(
            "generation {generation}, used for the next connection"
        ))
    }

    fn status(&self) -> &ReloadStatus {
        &self.status
    }

    fn other_files(&self) -> Vec<PathBuf> {
        let f = self.creds.files();
        [&f.ca, &f.cert, &f.key]
            .into_iter()
            .flatten()
            .cloned()
            .collect()
    }
}

/// The reload status families of `kind`'s files,
/// `etcd_readiness_{etcd,backup}_tls_files_*`.
pub fn register_status(registry: &mut Registry, kind: TlsKind) -> ReloadStatus {
    use crate::metrics::reload_status::Help;
    let help = match kind {
        TlsKind::Etcd => Help {
            successful: "Whether the last re-read of --etcd.cacert, --etcd.cert and --etcd.key succeeded (1) or failed (0)",
            timestamp: "Unix time of the last successful load or re-read of the etcd TLS files",
            reloads: "Re-reads of the etcd TLS files that changed or failed to change the material in use, by result",
        },
        TlsKind::Backup => Help {
            successful: "Whether the last re-read of --backup.cacert, --backup.cert and --backup.key succeeded (1) or failed (0)",
            timestamp: "Unix time of the last successful load or re-read of the backup TLS files",
            reloads: "Re-reads of the backup TLS files that changed or failed to change the material in use, by result",
        },
    };
    let prefix = match kind {
        TlsKind::Etcd => "etcd_readiness_etcd_tls_files",
        TlsKind::Backup => "etcd_readiness_backup_tls_files",
    };
    ReloadStatus::register(registry, prefix, help)
}

/// A client with `timeout` on every request (connect included) and the
/// given TLS files, read and checked now (see [`super::tls_material`]).
#[cfg(test)]
pub fn build_client(tls: &TlsFiles, timeout: Duration) -> Result<reqwest::Client, SourceError> {
    let material = if *tls == TlsFiles::default() {
        None
    } else {
        Some(Material::read(tls)?)
    };
    http_client(material.as_ref(), timeout)
}

/// An HTTP source's reqwest client ([`crate::outside::http_client::client`],
/// the one builder) with `material`'s CA and identity, `timeout` on every
/// request, pooled.
pub fn http_client(
    material: Option<&Material>,
    timeout: Duration,
) -> Result<reqwest::Client, SourceError> {
    use crate::outside::http_client::{Trust, client};
    let trust = match material.and_then(|m| m.ca.as_deref()) {
        Some(ca) => Trust::Only(ca),
        None => Trust::System,
    };
    let identity = material
        .and_then(|m| m.identity.as_ref())
        .map(|(c, k)| (c.as_slice(), k.as_slice()));
    client(trust, identity, Some(timeout), true)
}

/// An HTTP source's client, rebuilt for the next request when its
/// credentials changed; a refused handshake asks for a re-read.
#[derive(Debug)]
pub struct HttpClient {
    creds: Option<Credentials>,
    timeout: Duration,
    client: reqwest::Client,
    generation: u64,
}

impl HttpClient {
    pub fn new(creds: Option<Credentials>, timeout: Duration) -> Result<HttpClient, SourceError> {
        let material = creds.as_ref().map(Credentials::current);
        Ok(HttpClient {
            client: http_client(material.as_deref(), timeout)?,
            generation: material.map_or(0, |m| m.generation),
            creds,
            timeout,
        })
    }

    /// The client for the next request (a clone shares its pool).
    pub fn current(&mut self) -> reqwest::Client {
        if let Some(c) = &self.creds {
            let m = c.current();
            if m.generation != self.generation {
                match http_client(Some(&m), self.timeout) {
                    Ok(client) => {
                        tracing::info!(
                            files = c.kind().label(),
                            generation = m.generation,
                            "new TLS files in use for the next connection"
                        );
                        (self.client, self.generation) = (client, m.generation);
                    }
                    Err(e) => {
                        tracing::warn!(files = c.kind().label(), error = %e, "cannot use the new TLS files; the previous ones stay in use");
                        self.generation = m.generation;
                    }
                }
            }
        }
        self.client.clone()
    }

    /// A round failed with `e` at `now`: a refused handshake has the files
    /// re-read.
    pub fn failed(&self, e: &SampleError, now: Instant) {
        if e.reason == Reason::Tls
            && let Some(c) = &self.creds
        {
            c.refused(now);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(dir: &std::path::Path) -> TlsFiles {
        let ck = rcgen::generate_simple_self_signed(vec!["localhost".to_string()]).unwrap();
        let (ca, cert, key) = (
            dir.join("ca.pem"),
            dir.join("cert.pem"),
            dir.join("key.pem"),
        );
        std::fs::write(&ca, ck.cert.pem()).unwrap();
        std::fs::write(&cert, ck.cert.pem()).unwrap();
        std::fs::write(&key, ck.signing_key.serialize_pem()).unwrap();
        TlsFiles {
            ca: Some(ca),
            cert: Some(cert),
            key: Some(key),
        }
    }

    #[test]
    fn builds_with_ca_and_client_identity() {
        let dir = tempfile::tempdir().unwrap();
        build_client(&files(dir.path()), Duration::from_secs(1)).unwrap();
        build_client(&TlsFiles::default(), Duration::from_secs(1)).unwrap();
    }

    #[test]
    fn tls_file_problems_name_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = files(dir.path());
        f.key = None;
        let e = build_client(&f, Duration::from_secs(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "a client certificate and its key must be given together"
        );
        let missing = dir.path().join("nope.pem");
        let e = build_client(
            &TlsFiles {
                ca: Some(missing.clone()),
                ..TlsFiles::default()
            },
            Duration::from_secs(1),
        )
        .unwrap_err();
        assert!(
            e.to_string()
                .starts_with(&format!("cannot read the CA file {}", missing.display())),
            "{e}"
        );
    }

    fn pair(name: &str) -> (String, String) {
        let key = rcgen::KeyPair::generate().unwrap();
        let p = rcgen::CertificateParams::new(vec![name.to_string()]).unwrap();
        let cert = p.self_signed(&key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn read(name: &str, s: &str) -> Read {
        (PathBuf::from(name), s.as_bytes().to_vec())
    }

    #[test]
    fn a_certificate_and_its_own_key_are_a_pair_and_another_key_is_not() {
        let (cert, key) = pair("a");
        let (_, other_key) = pair("b");
        let m = Material::check(
            Some(read("ca.pem", &cert)),
            Some((read("c.pem", &cert), read("k.pem", &key))),
        )
        .unwrap();
        assert!(m.identity.is_some() && m.client_validity.is_some() && m.ca_validity.is_some());
        let e = Material::check(
            None,
            Some((read("c.pem", &cert), read("k.pem", &other_key))),
        )
        .unwrap_err();
        assert!(matches!(e, MaterialError::KeyMismatch { .. }), "{e}");
        assert_eq!(
            e.to_string(),
            "the client certificate c.pem does not match the key k.pem (a pair half-written?)"
        );
        // Half a file, or a key where the certificate goes: named, not a panic.
        let half = &cert[..cert.len() / 2];
        let e =
            Material::check(None, Some((read("c.pem", half), read("k.pem", &key)))).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the client certificate file c.pem"),
            "{e}"
        );
        let e = Material::check(Some(read("ca.pem", &key)), None).unwrap_err();
        assert_eq!(e.to_string(), "the CA file ca.pem holds no PEM certificate");
        let e =
            Material::check(None, Some((read("c.pem", &cert), read("k.pem", &cert)))).unwrap_err();
        assert!(
            e.to_string()
                .starts_with("the client key file k.pem holds no usable PEM private key"),
            "{e}"
        );
    }

    #[test]
    fn regression_a_mismatched_key_at_start_up_says_the_exporter_cannot_start() {
        // It said "the last good pair stays in use" while the process
        // exited: at start-up there is no last good pair.
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let (_, other_key) = pair("b");
        let key = f.key.clone().unwrap();
        std::fs::write(&key, other_key).unwrap();
        let e = Credentials::load(TlsKind::Etcd, &f).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "the exporter cannot start: --etcd.cacert/--etcd.cert/--etcd.key: the client \
                 certificate {} does not match the key {} (a pair half-written?)",
                f.cert.unwrap().display(),
                key.display()
            )
        );
        let e = Credentials::load(
            TlsKind::Backup,
            &TlsFiles {
                ca: Some(key.clone()),
                ..TlsFiles::default()
            },
        )
        .unwrap_err();
        assert_eq!(
            e.to_string(),
            format!(
                "the exporter cannot start: --backup.cacert/--backup.cert/--backup.key: the CA \
                 file {} holds no PEM certificate",
                key.display()
            )
        );
    }

    #[test]
    fn regression_a_failed_reload_is_logged_against_the_file_it_is_about() {
        // A bad CA file was logged with `path=` the client certificate's,
        // the file the reloader reads first.
        let dir = tempfile::tempdir().unwrap();
        let f = files(dir.path());
        let (ca, cert, key) = (
            f.ca.clone().unwrap(),
            f.cert.clone().unwrap(),
            f.key.clone().unwrap(),
        );
        let creds = Credentials::load(TlsKind::Etcd, &f).unwrap();
        let r = CredentialFiles::reloader(
            creds,
            ReloadStatus::default(),
            TlsMetrics::default(),
            Clock::node(),
        );
        assert_eq!(r.path(), cert, "the file read first");
        let trigger = crate::reload::ReloadTrigger::Resync;
        let (_, other_key) = pair("b");
        let good_key = std::fs::read(&key).unwrap();
        for (file, bad, says) in [
            (&ca, b"not PEM".to_vec(), "the CA file"),
            (&key, other_key.into_bytes(), "does not match the key"),
            (&cert, b"not PEM".to_vec(), "the client certificate file"),
        ] {
            let good = std::fs::read(file).unwrap();
            std::fs::write(file, bad).unwrap();
            let e = r.reload_now(trigger).unwrap_err();
            assert_eq!(e.file(r.path()), file.as_path(), "{e}");
            assert!(e.one_line().contains(says), "{e}");
            assert!(!e.one_line().contains("stays in use"), "{e}");
            std::fs::write(file, good).unwrap();
        }
        assert_eq!(std::fs::read(&key).unwrap(), good_key);
        r.reload_now(trigger).unwrap();
    }

    #[test]
    fn the_hash_changes_with_any_file() {
        let (cert, key) = pair("a");
        let (ca, _) = pair("ca");
        let one = Material::check(
            Some(read("ca", &ca)),
            Some((read("c", &cert), read("k", &key))),
        )
        .unwrap();
        let again = Material::check(
            Some(read("ca", &ca)),
            Some((read("c", &cert), read("k", &key))),
        )
        .unwrap();
        let no_ca = Material::check(None, Some((read("c", &cert), read("k", &key)))).unwrap();
        assert_eq!(one.sha256, again.sha256);
        assert_ne!(one.sha256, no_ca.sha256);
    }

    #[test]
    fn expiry_soon_is_the_last_tenth_of_the_lifetime_at_most_a_week() {
        let day = 86_400;
        let year = Validity {
            not_before: 0,
            not_after: 365 * day,
        };
        assert_eq!(problem_at(year, 100 * day), None);
        assert_eq!(problem_at(year, 358 * day - 1), None);
        assert_eq!(
            problem_at(year, 358 * day),
            Some(CertProblem::ExpiresSoon {
                not_after: 365 * day
            })
        );
        assert_eq!(
            problem_at(year, 365 * day + 1),
            Some(CertProblem::Expired {
                not_after: 365 * day
            })
        );
        assert_eq!(
            problem_at(year, -1),
            Some(CertProblem::NotYetValid { not_before: 0 })
        );
        // A one-day certificate: its last 2.4 hours.
        let one_day = Validity {
            not_before: 0,
            not_after: day,
        };
        assert_eq!(problem_at(one_day, day - 8_640 - 1), None);
        assert!(matches!(
            problem_at(one_day, day - 8_640),
            Some(CertProblem::ExpiresSoon { .. })
        ));
        // Absurd validities do not panic.
        let absurd = Validity {
            not_before: i64::MAX,
            not_after: i64::MIN,
        };
        assert!(problem_at(absurd, 0).is_some());
        let absurd = Validity {
            not_before: i64::MIN,
            not_after: i64::MAX,
        };
        assert_eq!(problem_at(absurd, 0), None);
        assert_eq!(
            CertProblem::Expired {
                not_after: 978_307_200
            }
            .to_string(),
            "expired at 2001-01-01T00:00:00Z (notAfter)"
        );
    }

    #[test]
    fn refused_handshakes_ask_for_a_re_read_at_most_once_a_second() {
        let dir = tempfile::tempdir().unwrap();
        let (cert, _) = pair("ca");
        let ca = dir.path().join("ca.pem");
        std::fs::write(&ca, cert).unwrap();
        let files = TlsFiles {
            ca: Some(ca),
            ..TlsFiles::default()
        };
        let c = Credentials::load(TlsKind::Backup, &files).unwrap();
        assert_eq!(c.current().generation, 1);
        let now = Instant::now();
        c.refused(now);
        c.refused(now + Duration::from_millis(10));
        let notify = c.recheck();
        // One permit only: the second refusal within the second stored none.
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(async {
            notify.notified().await;
            let second = tokio::time::timeout(Duration::from_millis(20), notify.notified()).await;
            assert!(second.is_err(), "a second re-read within a second");
        });
    }

    #[test]
    fn a_certificate_that_expires_soon_is_counted_once_per_material() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let mut p = rcgen::CertificateParams::new(vec!["client".to_string()]).unwrap();
        // A year-long certificate with a day left: in its last tenth.
        let now = rcgen::date_time_ymd(1970, 1, 1)
            + Duration::from_secs(unix_secs(SystemTime::now()) as u64);
        p.not_before = now - Duration::from_secs(364 * 86_400);
        p.not_after = now + Duration::from_secs(86_400);
        let cert = p.self_signed(&key).unwrap();
        let (c, k) = (dir.path().join("c.pem"), dir.path().join("k.pem"));
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        let files = TlsFiles {
            ca: None,
            cert: Some(c),
            key: Some(k),
        };
        let creds = Credentials::load(TlsKind::Backup, &files).unwrap();
        let metrics = TlsMetrics::default();
        let r = CredentialFiles::reloader(
            creds,
            ReloadStatus::default(),
            metrics.clone(),
            Clock::node(),
        );
        assert_eq!(metrics.problems(TlsKind::Backup, "expires_soon"), 1);
        r.reload_now(crate::reload::ReloadTrigger::Resync).unwrap();
        assert_eq!(metrics.problems(TlsKind::Backup, "expires_soon"), 1, "once");
        assert_eq!(metrics.problems(TlsKind::Backup, "expired"), 0);
    }
}
