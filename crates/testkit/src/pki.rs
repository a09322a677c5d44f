//! Test PKI made with rcgen: a CA, server and client certificates, and an
//! unrelated CA with a client certificate of its own, as PEM files, for the
//! mTLS tests (etcd, the backup sidecar, the exporter's own listener). The
//! CA stays usable, so a test can issue a new server certificate in place
//! (a cert-manager rotation) with a serial number of its choosing.

use etcd_readiness_exporter::cmd::localcluster::ServerTls;
use rcgen::{
    BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    SerialNumber,
};

/// Certificates in a temp dir: `ca.pem`, `other-ca.pem` (an unrelated CA),
/// `server.pem`/`server-key.pem` (127.0.0.1, localhost; serial 1000),
/// `client.pem`/`client-key.pem`, all signed by `ca`, and
/// `other-client.pem`/`other-client-key.pem` signed by `other-ca`.
pub struct Pki {
    pub dir: tempfile::TempDir,
    ca: Issuer<'static, KeyPair>,
}

impl Pki {
    pub fn path(&self, f: &str) -> std::path::PathBuf {
        self.dir.path().join(f)
    }

    /// etcd serving https with client-certificate auth from this PKI:
    /// `ca.pem`, `server.pem`, `server-key.pem`.
    pub fn etcd_server_tls(&self) -> ServerTls {
        ServerTls {
            ca: self.path("ca.pem"),
            cert: self.path("server.pem"),
            key: self.path("server-key.pem"),
        }
    }

    /// Issue a new server certificate for 127.0.0.1 and localhost with
    /// `serial`, signed by `ca`; returns (certificate PEM, key PEM).
    pub fn server_cert(&self, serial: u64) -> (String, String) {
        leaf(
            &self.ca,
            vec!["127.0.0.1".into(), "localhost".into()],
            ExtendedKeyUsagePurpose::ServerAuth,
            Some(serial),
        )
    }
}

impl Pki {
    /// Issue a client certificate whose subject's CN is `cn`, signed by
    /// `ca` (etcd with `--client-cert-auth` takes the CN as the user);
    /// written as `NAME.pem`/`NAME-key.pem` with NAME = `cn`, whose paths
    /// it returns.
    pub fn client_cert_with_cn(&self, cn: &str) -> (std::path::PathBuf, std::path::PathBuf) {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.distinguished_name = rcgen::DistinguishedName::new();
        p.distinguished_name.push(rcgen::DnType::CommonName, cn);
        p.extended_key_usages
            .push(ExtendedKeyUsagePurpose::ClientAuth);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &self.ca).unwrap();
        let (c, k) = (
            self.path(&format!("{cn}.pem")),
            self.path(&format!("{cn}-key.pem")),
        );
        std::fs::write(&c, cert.pem()).unwrap();
        std::fs::write(&k, key.serialize_pem()).unwrap();
        (c, k)
    }
}

fn ca(name: &str) -> (String, Issuer<'static, KeyPair>) {
    let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
    p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    p.distinguished_name.push(rcgen::DnType::CommonName, name);
    let key = KeyPair::generate().unwrap();
    let cert = p.self_signed(&key).unwrap();
    (cert.pem(), Issuer::new(p, key))
}

fn leaf(
    issuer: &Issuer<'static, KeyPair>,
    sans: Vec<String>,
    usage: ExtendedKeyUsagePurpose,
    serial: Option<u64>,
) -> (String, String) {
    let mut p = CertificateParams::new(sans).unwrap();
    p.extended_key_usages.push(usage);
    p.extended_key_usages
        .push(ExtendedKeyUsagePurpose::ClientAuth);
    p.serial_number = serial.map(SerialNumber::from);
    let key = KeyPair::generate().unwrap();
    let cert = p.signed_by(&key, issuer).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// CA, server cert (127.0.0.1), client cert, and an unrelated CA with a
/// client cert of its own.
pub fn make_pki() -> Pki {
    let dir = tempfile::tempdir().unwrap();
    let (ca_pem, issuer) = ca("test ca");
    let (other_pem, other) = ca("other ca");
    let (srv, srv_key) = leaf(
        &issuer,
        vec!["127.0.0.1".into(), "localhost".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
        Some(1000),
    );
    let (cli, cli_key) = leaf(
        &issuer,
        vec!["client".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
        None,
    );
    let (ocli, ocli_key) = leaf(
        &other,
        vec!["client".into()],
        ExtendedKeyUsagePurpose::ClientAuth,
        None,
    );
    for (f, s) in [
        ("ca.pem", &ca_pem),
        ("other-ca.pem", &other_pem),
        ("server.pem", &srv),
        ("server-key.pem", &srv_key),
        ("client.pem", &cli),
        ("client-key.pem", &cli_key),
        ("other-client.pem", &ocli),
        ("other-client-key.pem", &ocli_key),
    ] {
        std::fs::write(dir.path().join(f), s).unwrap();
    }
    Pki { dir, ca: issuer }
}
