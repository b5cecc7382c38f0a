//! Dev mode certificates (`kim webhook --dev`): a throw-away CA and a serving certificate for
//! `localhost` and `127.0.0.1`, generated with rcgen (ECDSA P-256, ring).
//!
//! Not for clusters: the CA key is not kept. For a cluster use cert-manager or the `certs/`
//! script, which issue a certificate for `<service>.<namespace>.svc`.

use super::certs::{CA_FILE, CERT_FILE, KEY_FILE};
use anyhow::Context;
use chrono::{Datelike, Duration, Utc};
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use std::path::Path;

/// Names the dev serving certificate is valid for (DNS and IP subject alternative names).
pub(crate) const DEV_HOSTS: [&str; 3] = ["localhost", "127.0.0.1", "::1"];

/// Validity of generated certificates, in days from yesterday.
pub(crate) const VALIDITY_DAYS: i64 = 365;

/// A CA certificate and a serving certificate + key it signed, all PEM.
#[derive(Clone)]
pub struct DevCerts {
    /// The CA certificate, to trust in clients (`curl --cacert`, `caBundle`).
    pub ca_pem: String,
    /// The serving certificate (leaf only).
    pub cert_pem: String,
    /// The serving certificate's private key (PKCS#8).
    pub key_pem: String,
}

impl std::fmt::Debug for DevCerts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DevCerts").finish_non_exhaustive()
    }
}

/// Generates a new CA (common name `ca_name`) and a serving certificate for `hosts` (each a
/// DNS name or an IP address), valid from yesterday for `VALIDITY_DAYS`.
///
/// Errors: a host that is neither a valid DNS name nor an IP address; key generation failure.
pub fn generate(ca_name: &str, hosts: &[&str]) -> anyhow::Result<DevCerts> {
    let from = Utc::now() - Duration::days(1);
    let until = from + Duration::days(VALIDITY_DAYS);
    let date =
        |d: chrono::DateTime<Utc>| rcgen::date_time_ymd(d.year(), d.month() as u8, d.day() as u8);

    let ca_key = KeyPair::generate().context("generating the CA key")?;
    let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca_params
        .distinguished_name
        .push(DnType::CommonName, ca_name);
    ca_params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    ca_params.not_before = date(from);
    ca_params.not_after = date(until);
    let ca_cert = ca_params.self_signed(&ca_key).context("signing the CA")?;
    let issuer = Issuer::new(ca_params, ca_key);

    let key = KeyPair::generate().context("generating the serving key")?;
    let names: Vec<String> = hosts.iter().map(|h| h.to_string()).collect();
    let mut params = CertificateParams::new(names).context("serving certificate names")?;
    params.distinguished_name.push(
        DnType::CommonName,
        hosts.first().copied().unwrap_or("localhost"),
    );
    params.is_ca = IsCa::ExplicitNoCa;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    params.use_authority_key_identifier_extension = true;
    params.not_before = date(from);
    params.not_after = date(until);
    let cert = params
        .signed_by(&key, &issuer)
        .context("signing the serving certificate")?;

    Ok(DevCerts {
        ca_pem: ca_cert.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
    })
}

impl DevCerts {
    /// Writes `ca.crt`, `tls.crt` and `tls.key` (mode 0600 on Unix) into `dir`, creating it.
    ///
    /// Errors: the directory or a file cannot be written.
    pub fn write_to(&self, dir: &Path) -> anyhow::Result<()> {
        std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        write_file(&dir.join(CA_FILE), self.ca_pem.as_bytes(), false)?;
        write_file(&dir.join(KEY_FILE), self.key_pem.as_bytes(), true)?;
        write_file(&dir.join(CERT_FILE), self.cert_pem.as_bytes(), false)?;
        Ok(())
    }
}

fn write_file(path: &Path, bytes: &[u8], private: bool) -> anyhow::Result<()> {
    use std::io::Write;
    let mut opts = std::fs::OpenOptions::new();
    opts.write(true).create(true).truncate(true);
    #[cfg(unix)]
    if private {
        use std::os::unix::fs::OpenOptionsExt;
        opts.mode(0o600);
    }
    #[cfg(not(unix))]
    let _ = private;
    let mut f = opts
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(bytes)
        .with_context(|| format!("writing {}", path.display()))
}

/// Makes sure `dir` holds a dev certificate: when `tls.crt` or `tls.key` is missing, generates
/// a CA and a certificate for `DEV_HOSTS` and writes `ca.crt`, `tls.crt`, `tls.key`.
/// Existing files are never overwritten when both are present.
///
/// Returns whether files were generated. Errors: as [`generate`] and [`DevCerts::write_to`].
pub fn ensure(dir: &Path) -> anyhow::Result<bool> {
    if dir.join(CERT_FILE).exists() && dir.join(KEY_FILE).exists() {
        return Ok(false);
    }
    generate("kim webhook dev CA", &DEV_HOSTS)?.write_to(dir)?;
    Ok(true)
}
