//! `tls_server_config` → a rustls [`ServerConfig`] (ring provider), with
//! exporter-toolkit's meanings: `client_auth_type` as Go's `tls.ClientAuthType`
//! (`NoClientCert`, `RequestClientCert`, `RequireAnyClientCert` — alias
//! `RequireClientCert` —, `VerifyClientCertIfGiven`,
//! `RequireAndVerifyClientCert`), `client_allowed_sans` matched exactly
//! against the client certificate's DNS, IP, e-mail and URI SANs, versions
//! `TLS12`/`TLS13` (default TLS 1.2 to 1.3), `cipher_suites` choosing and
//! ordering the TLS 1.2 suites (as in Go, the TLS 1.3 suites are not
//! configurable: their names are accepted and all three stay on),
//! `prefer_server_cipher_suites` (default true) and `curve_preferences`.
//! What rustls does not implement is refused with a message saying so:
//! TLS 1.0/1.1, CBC, RSA-key-exchange, 3DES and RC4 suites, curve P-521.

use std::sync::Arc;

use rustls::DistinguishedName;
use rustls::RootCertStore;
use rustls::ServerConfig;
use rustls::SignatureScheme;
use rustls::SupportedCipherSuite;
use rustls::client::danger::HandshakeSignatureValid;
use rustls::crypto::{SupportedKxGroup, WebPkiSupportedAlgorithms, ring};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, UnixTime};
use rustls::server::WebPkiClientVerifier;
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};

use serde::Deserialize;

use crate::outside::certificate::Validity;

/// `tls_server_config`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TlsShape {
    pub cert: Option<String>,
    pub key: Option<String>,
    pub client_ca: Option<String>,
    pub cert_file: Option<String>,
    pub key_file: Option<String>,
    pub client_auth_type: Option<String>,
    pub client_ca_file: Option<String>,
    pub client_allowed_sans: Option<Vec<String>>,
    pub min_version: Option<String>,
    pub max_version: Option<String>,
    pub cipher_suites: Option<Vec<String>>,
    pub prefer_server_cipher_suites: Option<bool>,
    pub curve_preferences: Option<Vec<String>>,
}

impl TlsShape {
    /// exporter-toolkit's `IsEnabled`: any certificate, key, CA or client
    /// auth setting turns TLS on; an empty `tls_server_config` does not.
    pub(super) fn is_enabled(&self) -> bool {
        let set = |s: &Option<String>| s.as_deref().is_some_and(|s| !s.is_empty());
        set(&self.cert)
            || set(&self.key)
            || set(&self.client_ca)
            || set(&self.cert_file)
            || set(&self.key_file)
            || set(&self.client_ca_file)
            || set(&self.client_auth_type)
    }
}

/// Reads a file the section names: `(what, path as written)` → its bytes,
/// or the caller's own error `E` (the web config's, which says which file).
pub(super) type SectionReader<'a, E> = &'a mut dyn FnMut(&'static str, &str) -> Result<Vec<u8>, E>;

/// Why a `tls_server_config` is unusable; each message names the key to
/// change and, where rustls lacks a feature, what to use instead.
#[derive(Debug, thiserror::Error)]
pub(super) enum TlsError {
    #[error("set {inline} or {file}, not both")]
    BothSet {
        inline: &'static str,
        file: &'static str,
    },
    #[error("missing one of {inline} or {file}")]
    Missing {
        inline: &'static str,
        file: &'static str,
    },
    #[error(
        "invalid client_auth_type {0:?} (one of NoClientCert, RequestClientCert, \
         RequireAnyClientCert, VerifyClientCertIfGiven, RequireAndVerifyClientCert)"
    )]
    UnknownClientAuth(String),
    #[error(
        "client CA's have been configured without a Client Auth Policy \
         (set client_auth_type, e.g. RequireAndVerifyClientCert)"
    )]
    CaWithoutClientAuth,
    #[error(
        "client_auth_type {0} needs client_ca_file (or client_ca) to verify client certificates against"
    )]
    VerifyWithoutCa(&'static str),
    #[error(
        "client_allowed_sans needs a client_auth_type that asks for client \
         certificates (e.g. RequireAndVerifyClientCert)"
    )]
    SansWithoutClientAuth,
    #[error(
        "{field} {version} is not supported: rustls implements TLS 1.2 and 1.3 only (use TLS12 or TLS13)"
    )]
    OldVersion {
        field: &'static str,
        version: String,
    },
    #[error("{field}: unknown TLS version: {version}")]
    UnknownVersion {
        field: &'static str,
        version: String,
    },
    #[error("min_version TLS{min} is above max_version TLS{max}")]
    VersionsInverted { min: u8, max: u8 },
    #[error(
        "cipher suite {0} is not supported: rustls implements only AEAD suites with \
         ECDHE key exchange (no CBC, RSA key exchange, 3DES or RC4); use \
         TLS_ECDHE_{{ECDSA,RSA}}_WITH_{{AES_128_GCM_SHA256,AES_256_GCM_SHA384,CHACHA20_POLY1305_SHA256}}"
    )]
    SuiteNotInRustls(String),
    #[error("unknown cipher: {0}")]
    UnknownSuite(String),
    #[error("curve CurveP521 is not supported by rustls; use X25519, CurveP256 or CurveP384")]
    CurveP521,
    #[error("unknown curve: {0}")]
    UnknownCurve(String),
    #[error("{what}: not PEM certificates ({error})")]
    NotPem {
        what: &'static str,
        error: rustls::pki_types::pem::Error,
    },
    #[error("{what}: no PEM certificate found")]
    NoCertificate { what: &'static str },
    #[error("key_file: no PEM private key found ({0})")]
    NoKey(rustls::pki_types::pem::Error),
    #[error("min_version/max_version/cipher_suites: {0}")]
    Versions(rustls::Error),
    #[error("cert_file and key_file: {0}")]
    CertAndKey(rustls::Error),
    #[error("client_ca_file: unusable CA certificate ({0})")]
    UnusableCa(rustls::Error),
    #[error("client_ca_file: cannot verify clients with it ({0})")]
    Verifier(rustls::server::VerifierBuilderError),
}

/// Why [`build`] failed: a file could not be read (the reader's error), or
/// what was read is not usable.
pub(super) enum BuildError<E> {
    Read(E),
    Invalid(TlsError),
}

impl<E> From<TlsError> for BuildError<E> {
    fn from(e: TlsError) -> Self {
        BuildError::Invalid(e)
    }
}

pub(super) struct Built {
    pub config: Arc<ServerConfig>,
    pub client_auth: String,
    /// The serving certificate's validity (the chain's first certificate).
    pub validity: Option<Validity>,
}

/// Go's `tls.ClientAuthType`, by exporter-toolkit's names.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ClientAuth {
    No,
    Request,
    RequireAny,
    VerifyIfGiven,
    RequireAndVerify,
}

impl ClientAuth {
    fn parse(s: Option<&str>) -> Result<Self, TlsError> {
        Ok(match s.unwrap_or("") {
            "" | "NoClientCert" => ClientAuth::No,
            "RequestClientCert" => ClientAuth::Request,
            "RequireAnyClientCert" | "RequireClientCert" => ClientAuth::RequireAny,
            "VerifyClientCertIfGiven" => ClientAuth::VerifyIfGiven,
            "RequireAndVerifyClientCert" => ClientAuth::RequireAndVerify,
            other => return Err(TlsError::UnknownClientAuth(other.to_string())),
        })
    }

    fn name(self) -> &'static str {
        match self {
            ClientAuth::No => "NoClientCert",
            ClientAuth::Request => "RequestClientCert",
            ClientAuth::RequireAny => "RequireAnyClientCert",
            ClientAuth::VerifyIfGiven => "VerifyClientCertIfGiven",
            ClientAuth::RequireAndVerify => "RequireAndVerifyClientCert",
        }
    }
}

/// The TLS 1.2 suites rustls (ring) implements, by Go's names.
fn tls12_suite(name: &str) -> Option<SupportedCipherSuite> {
    use ring::cipher_suite as cs;
    Some(match name {
        "TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256"
        | "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305" => {
            cs::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        }
        "TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256" => cs::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
        "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384" => cs::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
        "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256" | "TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305" => {
            cs::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256
        }
        _ => return None,
    })
}

/// Go's TLS 1.3 suite names: accepted, not configurable (as in Go).
const TLS13_NAMES: [&str; 3] = [
    "TLS_AES_128_GCM_SHA256",
    "TLS_AES_256_GCM_SHA384",
    "TLS_CHACHA20_POLY1305_SHA256",
];

/// Suites Go knows (secure or insecure list) that rustls does not implement.
const NOT_IN_RUSTLS: [&str; 16] = [
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA",
    "TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA256",
    "TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_CBC_SHA",
    "TLS_RSA_WITH_AES_256_CBC_SHA",
    "TLS_RSA_WITH_AES_128_CBC_SHA256",
    "TLS_RSA_WITH_AES_128_GCM_SHA256",
    "TLS_RSA_WITH_AES_256_GCM_SHA384",
    "TLS_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_ECDHE_RSA_WITH_3DES_EDE_CBC_SHA",
    "TLS_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_RSA_WITH_RC4_128_SHA",
    "TLS_ECDHE_ECDSA_WITH_RC4_128_SHA",
];

fn cipher_suites(names: &[String]) -> Result<Vec<SupportedCipherSuite>, TlsError> {
    let mut out = Vec::new();
    for name in names {
        if let Some(s) = tls12_suite(name) {
            if !out.contains(&s) {
                out.push(s);
            }
        } else if TLS13_NAMES.contains(&name.as_str()) {
            // Go ignores cipher_suites for TLS 1.3; so do we.
        } else if NOT_IN_RUSTLS.contains(&name.as_str()) {
            return Err(TlsError::SuiteNotInRustls(name.clone()));
        } else {
            return Err(TlsError::UnknownSuite(name.clone()));
        }
    }
    Ok(out)
}

fn curves(names: &[String]) -> Result<Vec<&'static dyn SupportedKxGroup>, TlsError> {
    let mut out: Vec<&'static dyn SupportedKxGroup> = Vec::new();
    for name in names {
        let g: &'static dyn SupportedKxGroup = match name.as_str() {
            "X25519" => ring::kx_group::X25519,
            "CurveP256" => ring::kx_group::SECP256R1,
            "CurveP384" => ring::kx_group::SECP384R1,
            "CurveP521" => return Err(TlsError::CurveP521),
            other => return Err(TlsError::UnknownCurve(other.to_string())),
        };
        if !out.iter().any(|o| o.name() == g.name()) {
            out.push(g);
        }
    }
    Ok(out)
}

/// 12 for TLS 1.2, 13 for TLS 1.3.
fn version(field: &'static str, v: Option<&str>, default: u8) -> Result<u8, TlsError> {
    match v {
        None | Some("") => Ok(default),
        Some("TLS12") => Ok(12),
        Some("TLS13") => Ok(13),
        Some(old @ ("TLS10" | "TLS11")) => Err(TlsError::OldVersion {
            field,
            version: old.to_string(),
        }),
        Some(other) => Err(TlsError::UnknownVersion {
            field,
            version: other.to_string(),
        }),
    }
}

fn certs(pem: &[u8], what: &'static str) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .map_err(|error| TlsError::NotPem { what, error })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate { what });
    }
    Ok(certs)
}

/// Build the rustls configuration; `read(what, path)` reads the files the
/// section names. `http2` decides the ALPN offer.
/// What a `tls_server_config` asks for, checked: which material comes
/// from where, the client-auth policy, versions and the crypto provider with
/// the chosen suites and groups. Built by [`settings`] without reading a
/// file, so every rule about the section's shape is testable without PEM.
pub(super) struct TlsSettings {
    cert: Source,
    key: Source,
    ca: Option<Source>,
    auth: ClientAuth,
    versions: Vec<&'static rustls::SupportedProtocolVersion>,
    provider: Arc<rustls::crypto::CryptoProvider>,
    allowed_sans: Option<Vec<String>>,
    prefer_server_order: bool,
}

/// The section's shape → [`TlsSettings`], or why it is unusable. No IO.
pub(super) fn settings(t: &TlsShape) -> Result<TlsSettings, TlsError> {
    let cert = pick(&t.cert, &t.cert_file, "cert", "cert_file")?.ok_or(TlsError::Missing {
        inline: "cert",
        file: "cert_file",
    })?;
    let key = pick(&t.key, &t.key_file, "key", "key_file")?.ok_or(TlsError::Missing {
        inline: "key",
        file: "key_file",
    })?;
    let ca = pick(
        &t.client_ca,
        &t.client_ca_file,
        "client_ca",
        "client_ca_file",
    )?;
    let auth = client_auth(t, ca.is_some())?;
    Ok(TlsSettings {
        cert,
        key,
        ca,
        auth,
        versions: versions(t)?,
        provider: Arc::new(provider(t)?),
        allowed_sans: t.client_allowed_sans.clone(),
        prefer_server_order: t.prefer_server_cipher_suites.unwrap_or(true),
    })
}

/// Where one piece of material comes from: inline text or a file, never
/// both; `None` when neither is set (an empty string counts as unset).
fn pick(
    inline: &Option<String>,
    file: &Option<String>,
    inline_key: &'static str,
    file_key: &'static str,
) -> Result<Option<Source>, TlsError> {
    let nonempty = |s: &Option<String>| s.clone().filter(|s| !s.is_empty());
    match (nonempty(inline), nonempty(file)) {
        (Some(_), Some(_)) => Err(TlsError::BothSet {
            inline: inline_key,
            file: file_key,
        }),
        (Some(text), None) => Ok(Some(Source::Inline(text))),
        (None, Some(path)) => Ok(Some(Source::File(path))),
        (None, None) => Ok(None),
    }
}

/// `client_auth_type`, checked against whether a client CA is configured
/// and whether `client_allowed_sans` has certificates to look at.
fn client_auth(t: &TlsShape, has_ca: bool) -> Result<ClientAuth, TlsError> {
    let auth = ClientAuth::parse(t.client_auth_type.as_deref())?;
    if has_ca && auth == ClientAuth::No {
        return Err(TlsError::CaWithoutClientAuth);
    }
    if matches!(
        auth,
        ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify
    ) && !has_ca
    {
        return Err(TlsError::VerifyWithoutCa(auth.name()));
    }
    if t.client_allowed_sans.is_some() && auth == ClientAuth::No {
        return Err(TlsError::SansWithoutClientAuth);
    }
    Ok(auth)
}

/// `min_version` to `max_version` (default TLS 1.2 to 1.3) as rustls versions.
fn versions(t: &TlsShape) -> Result<Vec<&'static rustls::SupportedProtocolVersion>, TlsError> {
    let min = version("min_version", t.min_version.as_deref(), 12)?;
    let max = version("max_version", t.max_version.as_deref(), 13)?;
    if min > max {
        return Err(TlsError::VersionsInverted { min, max });
    }
    let mut versions: Vec<&'static rustls::SupportedProtocolVersion> = Vec::new();
    if min <= 12 {
        versions.push(&rustls::version::TLS12);
    }
    if max >= 13 {
        versions.push(&rustls::version::TLS13);
    }
    Ok(versions)
}

/// ring's provider narrowed to `cipher_suites` (TLS 1.2 only: the TLS 1.3
/// suites stay on, as in Go) and `curve_preferences`.
fn provider(t: &TlsShape) -> Result<rustls::crypto::CryptoProvider, TlsError> {
    let mut provider = ring::default_provider();
    if let Some(names) = t.cipher_suites.as_ref().filter(|n| !n.is_empty()) {
        let tls12 = cipher_suites(names)?;
        let mut suites: Vec<SupportedCipherSuite> = provider
            .cipher_suites
            .iter()
            .filter(|s| matches!(s, SupportedCipherSuite::Tls13(_)))
            .copied()
            .collect();
        suites.extend(tls12);
        provider.cipher_suites = suites;
    }
    if let Some(names) = t.curve_preferences.as_ref().filter(|n| !n.is_empty()) {
        provider.kx_groups = curves(names)?;
    }
    Ok(provider)
}

/// [`TlsSettings`] → a rustls server configuration: reads the files through
/// `read`, parses the PEM and assembles the client verifier.
pub(super) fn build<E>(
    s: TlsSettings,
    http2: bool,
    read: SectionReader<'_, E>,
) -> Result<Built, BuildError<E>> {
    let mut load = |src: Source, what: &'static str| -> Result<Vec<u8>, BuildError<E>> {
        match src {
            Source::Inline(text) => Ok(text.into_bytes()),
            Source::File(path) => read(what, &path).map_err(BuildError::Read),
        }
    };
    let cert_pem = load(s.cert, "tls_server_config.cert_file")?;
    let key_pem = load(s.key, "tls_server_config.key_file")?;
    let ca_pem = match s.ca {
        Some(ca) => Some(load(ca, "tls_server_config.client_ca_file")?),
        None => None,
    };
    let chain = certs(&cert_pem, "cert_file")?;
    let validity = chain.first().and_then(|c| Validity::of(c.as_ref()));
    let key = PrivateKeyDer::from_pem_slice(&key_pem).map_err(TlsError::NoKey)?;
    let verifier = verifier(s.auth, ca_pem.as_deref(), &s.provider, s.allowed_sans)?;
    let mut config = ServerConfig::builder_with_provider(s.provider)
        .with_protocol_versions(&s.versions)
        .map_err(TlsError::Versions)?
        .with_client_cert_verifier(verifier)
        .with_single_cert(chain, key)
        .map_err(TlsError::CertAndKey)?;
    config.ignore_client_order = s.prefer_server_order;
    config.alpn_protocols = if http2 {
        vec![b"h2".to_vec(), b"http/1.1".to_vec()]
    } else {
        vec![b"http/1.1".to_vec()]
    };
    Ok(Built {
        config: Arc::new(config),
        client_auth: s.auth.name().to_string(),
        validity,
    })
}

/// The client verifier `auth` asks for, trusting `ca_pem` where it
/// verifies, narrowed to `allowed_sans` where given.
fn verifier(
    auth: ClientAuth,
    ca_pem: Option<&[u8]>,
    provider: &Arc<rustls::crypto::CryptoProvider>,
    allowed_sans: Option<Vec<String>>,
) -> Result<Arc<dyn ClientCertVerifier>, TlsError> {
    let verifier: Arc<dyn ClientCertVerifier> = match auth {
        ClientAuth::No => WebPkiClientVerifier::no_client_auth(),
        ClientAuth::Request | ClientAuth::RequireAny => Arc::new(AnyClientCert {
            mandatory: auth == ClientAuth::RequireAny,
            algorithms: provider.signature_verification_algorithms,
        }),
        ClientAuth::VerifyIfGiven | ClientAuth::RequireAndVerify => {
            let mut roots = RootCertStore::empty();
            for c in certs(ca_pem.unwrap_or_default(), "client_ca_file")? {
                roots.add(c).map_err(TlsError::UnusableCa)?;
            }
            let b = WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone());
            let b = if auth == ClientAuth::VerifyIfGiven {
                b.allow_unauthenticated()
            } else {
                b
            };
            b.build().map_err(TlsError::Verifier)?
        }
    };
    Ok(match allowed_sans {
        Some(sans) => Arc::new(AllowedSans {
            inner: verifier,
            sans,
        }),
        None => verifier,
    })
}

enum Source {
    Inline(String),
    File(String),
}

/// `RequestClientCert` / `RequireAnyClientCert`: ask for (or require) a
/// certificate, check that the client holds its key, trust anything.
#[derive(Debug)]
struct AnyClientCert {
    mandatory: bool,
    algorithms: WebPkiSupportedAlgorithms,
}

impl ClientCertVerifier for AnyClientCert {
    fn client_auth_mandatory(&self) -> bool {
        self.mandatory
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        Ok(ClientCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.algorithms.supported_schemes()
    }
}

/// `client_allowed_sans`: after the inner verifier, the certificate must
/// carry one of these exactly as a DNS, IP, e-mail or URI SAN.
#[derive(Debug)]
struct AllowedSans {
    inner: Arc<dyn ClientCertVerifier>,
    sans: Vec<String>,
}

/// A client certificate that is not DER X.509 (rustls has already checked
/// its signature, so in practice this does not happen).
#[derive(Debug, thiserror::Error)]
#[error("cannot parse the client certificate: {0}")]
pub(super) struct UnparsableCertificate(x509_parser::nom::Err<x509_parser::error::X509Error>);

/// Every DNS, IP, e-mail and URI SAN of a DER certificate, as text.
pub(super) fn sans_of(der: &[u8]) -> Result<Vec<String>, UnparsableCertificate> {
    use x509_parser::extensions::GeneralName;
    let (_, cert) = x509_parser::parse_x509_certificate(der).map_err(UnparsableCertificate)?;
    let mut out = Vec::new();
    if let Ok(Some(ext)) = cert.subject_alternative_name() {
        for name in &ext.value.general_names {
            match name {
                GeneralName::DNSName(s) | GeneralName::RFC822Name(s) | GeneralName::URI(s) => {
                    out.push((*s).to_string())
                }
                GeneralName::IPAddress(b) => match b.len() {
                    4 => out.push(std::net::Ipv4Addr::new(b[0], b[1], b[2], b[3]).to_string()),
                    16 => {
                        let mut a = [0u8; 16];
                        a.copy_from_slice(b);
                        out.push(std::net::Ipv6Addr::from(a).to_string());
                    }
                    _ => {}
                },
                _ => {}
            }
        }
    }
    Ok(out)
}

impl ClientCertVerifier for AllowedSans {
    fn offer_client_auth(&self) -> bool {
        self.inner.offer_client_auth()
    }

    fn client_auth_mandatory(&self) -> bool {
        self.inner.client_auth_mandatory()
    }

    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        self.inner.root_hint_subjects()
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        let ok = self
            .inner
            .verify_client_cert(end_entity, intermediates, now)?;
        let found =
            sans_of(end_entity.as_ref()).map_err(|e| rustls::Error::General(e.to_string()))?;
        if found.iter().any(|s| self.sans.contains(s)) {
            Ok(ok)
        } else {
            Err(rustls::Error::General(format!(
                "could not find allowed SANs in client cert, found: {found:?}"
            )))
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner.supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_and_suites_rustls_lacks_are_refused_by_name() {
        assert!(
            version("min_version", Some("TLS11"), 12)
                .unwrap_err()
                .to_string()
                .contains("TLS 1.2 and 1.3 only")
        );
        assert!(
            version("min_version", Some("TLS111"), 12)
                .unwrap_err()
                .to_string()
                .contains("unknown TLS version: TLS111")
        );
        let e = cipher_suites(&["TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA".into()])
            .unwrap_err()
            .to_string();
        assert!(e.contains("is not supported"), "{e}");
        let e = cipher_suites(&["TLS_INVENTED_CIPHER".into()])
            .unwrap_err()
            .to_string();
        assert_eq!(e, "unknown cipher: TLS_INVENTED_CIPHER");
        let ok = cipher_suites(&[
            "TLS_AES_128_GCM_SHA256".into(),
            "TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384".into(),
        ])
        .unwrap();
        assert_eq!(ok.len(), 1);
        assert!(curves(&["CurveP521".into()]).is_err());
        assert_eq!(
            curves(&["X25519".into(), "CurveP256".into()])
                .unwrap()
                .len(),
            2
        );
    }

    #[test]
    fn the_section_is_checked_without_reading_a_file() {
        let shape = |f: &dyn Fn(&mut TlsShape)| {
            let mut t = TlsShape {
                cert_file: Some("c.pem".into()),
                key_file: Some("k.pem".into()),
                ..TlsShape::default()
            };
            f(&mut t);
            t
        };
        let err = |t: TlsShape| settings(&t).err().expect("refused").to_string();
        let ok = settings(&shape(&|_| {})).expect("cert and key files are enough");
        assert_eq!(ok.auth, ClientAuth::No);
        assert_eq!(ok.versions.len(), 2);
        assert!(ok.prefer_server_order);
        assert_eq!(
            err(shape(&|t| t.cert = Some("PEM".into()))),
            "set cert or cert_file, not both"
        );
        assert_eq!(
            err(shape(&|t| t.key_file = None)),
            "missing one of key or key_file"
        );
        assert!(
            err(shape(&|t| t.client_ca_file = Some("ca.pem".into())))
                .contains("without a Client Auth Policy")
        );
        assert!(
            err(shape(&|t| {
                t.client_auth_type = Some("RequireAndVerifyClientCert".into())
            }))
            .contains("needs client_ca_file")
        );
        assert!(
            err(shape(&|t| t.client_allowed_sans = Some(vec!["a".into()])))
                .contains("client_allowed_sans needs a client_auth_type")
        );
        assert_eq!(
            err(shape(&|t| {
                t.min_version = Some("TLS13".into());
                t.max_version = Some("TLS12".into());
            })),
            "min_version TLS13 is above max_version TLS12"
        );
        let narrow = settings(&shape(&|t| {
            t.cipher_suites = Some(vec!["TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384".into()]);
            t.curve_preferences = Some(vec!["X25519".into()]);
            t.min_version = Some("TLS13".into());
        }))
        .expect("valid");
        assert_eq!(narrow.versions.len(), 1);
        assert_eq!(narrow.provider.kx_groups.len(), 1);
        // The three TLS 1.3 suites stay on beside the one TLS 1.2 suite.
        assert_eq!(narrow.provider.cipher_suites.len(), 4);
    }

    /// A CA, a server certificate for 127.0.0.1 and a client certificate
    /// with the SANs `client.example` and 10.0.0.1, as PEM.
    struct Pem {
        ca: String,
        cert: String,
        key: String,
        client: String,
        client_key: String,
    }

    fn pem() -> Pem {
        use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().unwrap();
        let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
        let issuer = Issuer::new(ca, ca_key);
        let leaf = |sans: Vec<String>| {
            let key = KeyPair::generate().unwrap();
            let cert = CertificateParams::new(sans)
                .unwrap()
                .signed_by(&key, &issuer)
                .unwrap();
            (cert.pem(), key.serialize_pem())
        };
        let (cert, key) = leaf(vec!["127.0.0.1".into()]);
        let (client, client_key) = leaf(vec!["client.example".into(), "10.0.0.1".into()]);
        Pem {
            ca: ca_pem,
            cert,
            key,
            client,
            client_key,
        }
    }

    fn server(p: &Pem, auth: &str, sans: Option<Vec<String>>) -> Result<Arc<ServerConfig>, String> {
        let t = TlsShape {
            cert: Some(p.cert.clone()),
            key: Some(p.key.clone()),
            client_ca: Some(p.ca.clone()).filter(|_| auth.contains("Verify")),
            client_auth_type: Some(auth.to_string()),
            client_allowed_sans: sans,
            ..TlsShape::default()
        };
        let read: SectionReader<'_, String> = &mut |_, _| unreachable!();
        match build(settings(&t).map_err(|e| e.to_string())?, true, read) {
            Ok(b) => Ok(b.config),
            Err(BuildError::Invalid(m)) => Err(m.to_string()),
            Err(BuildError::Read(e)) => Err(e),
        }
    }

    /// A full handshake over an in-memory pipe; Ok when both sides finish.
    async fn handshake(server: Arc<ServerConfig>, p: &Pem, with_cert: bool) -> Result<(), String> {
        handshake_with(
            server,
            p,
            with_cert,
            &[&rustls::version::TLS12, &rustls::version::TLS13],
        )
        .await
        .map(|_| ())
    }

    /// [`handshake`] with the client offering only `versions`; returns the
    /// negotiated version and suite.
    async fn handshake_with(
        server: Arc<ServerConfig>,
        p: &Pem,
        with_cert: bool,
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Result<(rustls::ProtocolVersion, rustls::CipherSuite), String> {
        use rustls::ClientConfig;
        use rustls::pki_types::ServerName;
        let mut roots = RootCertStore::empty();
        roots
            .add(certs(p.ca.as_bytes(), "ca").unwrap().remove(0))
            .unwrap();
        let b = ClientConfig::builder_with_provider(Arc::new(ring::default_provider()))
            .with_protocol_versions(versions)
            .unwrap()
            .with_root_certificates(roots);
        let client = if with_cert {
            b.with_client_auth_cert(
                certs(p.client.as_bytes(), "client").unwrap(),
                PrivateKeyDer::from_pem_slice(p.client_key.as_bytes()).unwrap(),
            )
            .unwrap()
        } else {
            b.with_no_client_auth()
        };
        let (a, b) = tokio::io::duplex(64 * 1024);
        let accept = tokio_rustls::TlsAcceptor::from(server).accept(a);
        let connect = async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = tokio_rustls::TlsConnector::from(Arc::new(client))
                .connect(ServerName::try_from("127.0.0.1").unwrap(), b)
                .await?;
            // TLS 1.3: the server's verdict on the client certificate
            // arrives after the client's side of the handshake.
            s.write_all(b"x").await?;
            let mut buf = [0u8; 1];
            s.read_exact(&mut buf).await?;
            let (_, conn) = s.get_ref();
            Ok::<_, std::io::Error>((
                conn.protocol_version(),
                conn.negotiated_cipher_suite().map(|c| c.suite()),
            ))
        };
        let serve = async {
            use tokio::io::{AsyncReadExt, AsyncWriteExt};
            let mut s = accept.await?;
            let mut buf = [0u8; 1];
            s.read_exact(&mut buf).await?;
            s.write_all(b"y").await?;
            s.flush().await
        };
        let (c, s) = tokio::join!(connect, serve);
        s.map_err(|e| format!("server: {e}"))?;
        match c.map_err(|e| format!("client: {e}"))? {
            (Some(v), Some(suite)) => Ok((v, suite)),
            other => Err(format!("no version or suite negotiated: {other:?}")),
        }
    }

    #[tokio::test]
    async fn versions_and_tls12_suites_are_what_the_file_says() {
        let p = pem();
        let tls12 = [&rustls::version::TLS12];
        let tls13 = [&rustls::version::TLS13];
        let shape = |min: &str, suites: Option<Vec<String>>| TlsShape {
            cert: Some(p.cert.clone()),
            key: Some(p.key.clone()),
            min_version: Some(min.to_string()),
            cipher_suites: suites,
            ..TlsShape::default()
        };
        let built = |t: TlsShape| match build::<String>(
            settings(&t).expect("a valid section"),
            true,
            &mut |_, _| unreachable!(),
        ) {
            Ok(b) => b.config,
            Err(_) => panic!("a valid section"),
        };
        // min_version TLS13 refuses a TLS 1.2-only client.
        let s = built(shape("TLS13", None));
        assert!(handshake_with(s.clone(), &p, false, &tls12).await.is_err());
        let (v, _) = handshake_with(s, &p, false, &tls13).await.unwrap();
        assert_eq!(v, rustls::ProtocolVersion::TLSv1_3);
        // cipher_suites picks the TLS 1.2 suite (rcgen's keys are ECDSA).
        let only = "TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256".to_string();
        let s = built(shape("TLS12", Some(vec![only.clone()])));
        let (v, suite) = handshake_with(s, &p, false, &tls12).await.unwrap();
        assert_eq!(v, rustls::ProtocolVersion::TLSv1_2);
        assert_eq!(format!("{suite:?}"), only);
        // Only RSA suites listed for an ECDSA certificate: no TLS 1.2 handshake,
        // as with Go.
        let s = built(shape(
            "TLS12",
            Some(vec!["TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256".to_string()]),
        ));
        assert!(handshake_with(s, &p, false, &tls12).await.is_err());
    }

    #[tokio::test]
    async fn each_client_auth_type_asks_what_go_would() {
        let p = pem();
        let cases = [
            ("NoClientCert", false, true),
            ("RequestClientCert", false, true),
            ("RequestClientCert", true, true),
            ("RequireAnyClientCert", false, false),
            ("RequireAnyClientCert", true, true),
            ("VerifyClientCertIfGiven", false, true),
            ("VerifyClientCertIfGiven", true, true),
            ("RequireAndVerifyClientCert", false, false),
            ("RequireAndVerifyClientCert", true, true),
        ];
        for (auth, with_cert, ok) in cases {
            let r = handshake(server(&p, auth, None).unwrap(), &p, with_cert).await;
            assert_eq!(r.is_ok(), ok, "{auth}, client cert {with_cert}: {r:?}");
        }
    }

    #[tokio::test]
    async fn allowed_sans_admit_only_a_listed_client() {
        let p = pem();
        for (sans, ok) in [
            (vec!["client.example".to_string()], true),
            (vec!["10.0.0.1".to_string()], true),
            (vec!["someone.else".to_string()], false),
        ] {
            let s = server(&p, "RequireAndVerifyClientCert", Some(sans.clone())).unwrap();
            let r = handshake(s, &p, true).await;
            assert_eq!(r.is_ok(), ok, "{sans:?}: {r:?}");
        }
        let e = server(&p, "NoClientCert", Some(vec!["x".into()])).unwrap_err();
        assert!(e.contains("client_allowed_sans needs"), "{e}");
    }

    #[test]
    fn client_auth_types_are_gos_names() {
        assert_eq!(
            ClientAuth::parse(Some("RequireClientCert")).unwrap(),
            ClientAuth::RequireAny
        );
        assert_eq!(ClientAuth::parse(None).unwrap(), ClientAuth::No);
        assert!(ClientAuth::parse(Some("Whatever")).is_err());
    }
}
