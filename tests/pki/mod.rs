//! Test PKI made with rcgen: a CA, server and client certificates, and an
//! unrelated CA, as PEM files, for the mTLS tests (etcd and the backup sidecar).

#![allow(dead_code)]

/// Certificates in a temp dir: `ca.pem`, `other-ca.pem` (an unrelated CA),
/// `server.pem`/`server-key.pem` (127.0.0.1, localhost) and
/// `client.pem`/`client-key.pem`, all but `other-ca` signed by `ca`.
pub struct Pki {
    pub dir: tempfile::TempDir,
}

impl Pki {
    pub fn path(&self, f: &str) -> std::path::PathBuf {
        self.dir.path().join(f)
    }
}

/// CA, server cert (127.0.0.1), client cert, and an unrelated CA.
pub fn make_pki() -> Pki {
    use rcgen::{
        BasicConstraints, CertificateParams, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    };
    let dir = tempfile::tempdir().unwrap();
    let ca = |name: &str| {
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(rcgen::DnType::CommonName, name);
        let key = KeyPair::generate().unwrap();
        let cert = p.self_signed(&key).unwrap();
        (cert.pem(), Issuer::new(p, key))
    };
    let (ca_pem, issuer) = ca("test ca");
    let (other_pem, _) = ca("other ca");
    let leaf = |sans: Vec<String>, usage: ExtendedKeyUsagePurpose| {
        let mut p = CertificateParams::new(sans).unwrap();
        p.extended_key_usages.push(usage);
        p.extended_key_usages
            .push(ExtendedKeyUsagePurpose::ClientAuth);
        let key = KeyPair::generate().unwrap();
        let cert = p.signed_by(&key, &issuer).unwrap();
        (cert.pem(), key.serialize_pem())
    };
    let (srv, srv_key) = leaf(
        vec!["127.0.0.1".into(), "localhost".into()],
        ExtendedKeyUsagePurpose::ServerAuth,
    );
    let (cli, cli_key) = leaf(vec!["client".into()], ExtendedKeyUsagePurpose::ClientAuth);
    for (f, s) in [
        ("ca.pem", &ca_pem),
        ("other-ca.pem", &other_pem),
        ("server.pem", &srv),
        ("server-key.pem", &srv_key),
        ("client.pem", &cli),
        ("client-key.pem", &cli_key),
    ] {
        std::fs::write(dir.path().join(f), s).unwrap();
    }
    Pki { dir }
}
