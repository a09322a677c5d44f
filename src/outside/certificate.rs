//! A certificate's validity, read from the DER of a PEM file the exporter
//! was given (its own serving certificate, the sources' client certificates
//! and CAs): when it starts and ends, and why it is not valid at a time.

/// When a certificate is valid: `notBefore` and `notAfter` in Unix seconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Validity {
    pub not_before: i64,
    pub not_after: i64,
}

impl Validity {
    /// Of the DER certificate `der` (None when it does not parse: rustls
    /// then refuses it at the handshake, as it always did).
    pub fn of(der: &[u8]) -> Option<Validity> {
        let (_, c) = x509_parser::parse_x509_certificate(der).ok()?;
        Some(Validity {
            not_before: c.validity().not_before.timestamp(),
            not_after: c.validity().not_after.timestamp(),
        })
    }

    /// Why the certificate is not valid at `now` (Unix seconds), if it is not.
    pub fn problem(&self, now: i64) -> Option<String> {
        let at = |t: i64| super::checked::rfc3339(t.saturating_mul(1000));
        if now > self.not_after {
            Some(format!("expired at {} (notAfter)", at(self.not_after)))
        } else if now < self.not_before {
            Some(format!(
                "not valid before {} (notBefore)",
                at(self.not_before)
            ))
        } else {
            None
        }
    }
}

/// The subject's common name of the first certificate in the PEM text
/// `pem` (`None` when there is none or it does not parse): the user etcd
/// takes a client for with `--client-cert-auth`.
pub fn common_name(pem: &[u8]) -> Option<String> {
    let (_, p) = x509_parser::pem::parse_x509_pem(pem).ok()?;
    let (_, c) = x509_parser::parse_x509_certificate(&p.contents).ok()?;
    let cn = c.subject().iter_common_name().next()?.as_str().ok()?;
    Some(etcd_readiness_policy::text::cut_at(cn, 256).to_string())
}
