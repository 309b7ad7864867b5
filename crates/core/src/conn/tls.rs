//! TLS to a shard with the operator's own files: a CA bundle to trust
//! instead of the system's roots, and a client certificate for servers that
//! ask for one (`tls-auth-clients yes`).

use std::{path::PathBuf, sync::Arc};

use fred::types::config::{TlsConfig, TlsConnector};
use rustls::{
    ClientConfig, RootCertStore,
    pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject},
};

/// The files a shard's TLS connections use. With none of them set, TLS
/// trusts the system's roots (fred's default for a `rediss://` URL).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TlsFiles {
    /// PEM certificates to trust, instead of the system's roots.
    pub ca_file: Option<PathBuf>,
    /// PEM client certificate chain, sent when the server asks for one.
    pub cert_file: Option<PathBuf>,
    /// PEM private key of `cert_file` (PKCS#8, PKCS#1 or SEC1).
    pub key_file: Option<PathBuf>,
}

impl TlsFiles {
    /// Reads the files and builds fred's TLS settings from them. Every
    /// error names the file and what is wrong with it, for the operator.
    pub fn config(&self) -> Result<TlsConfig, String> {
        let roots = match &self.ca_file {
            Some(path) => {
                let mut roots = RootCertStore::empty();
                for cert in certificates(path)? {
                    roots
                        .add(cert)
                        .map_err(|e| format!("ca_file {}: {e}", path.display()))?;
                }
                roots
            }
            None => system_roots()?,
        };
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let builder = ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .map_err(|e| format!("tls: {e}"))?
            .with_root_certificates(roots);
        let config = match (&self.cert_file, &self.key_file) {
            (Some(cert), Some(key_file)) => {
                let chain = certificates(cert)?;
                let key = PrivateKeyDer::from_pem_file(key_file)
                    .map_err(|e| format!("key_file {}: {e}", key_file.display()))?;
                builder
                    .with_client_auth_cert(chain, key)
                    .map_err(|e| match e {
                        rustls::Error::InconsistentKeys(_) => format!(
                            "key_file {} is not the key of cert_file {}",
                            key_file.display(),
                            cert.display()
                        ),
                        e => format!("cert_file {}: {e}", cert.display()),
                    })?
            }
            (None, None) => builder.with_no_client_auth(),
            _ => return Err("cert_file and key_file go together: give both or neither".into()),
        };
        Ok(TlsConnector::from(config).into())
    }
}

/// Whether fred connects to `url` with TLS (`rediss://`,
/// `rediss-cluster://`, `valkeys://`…), as [`super::Connection::connect`] reads
/// it.
pub fn url_uses_tls(url: &str) -> bool {
    fred::types::config::Config::from_url(url).is_ok_and(|c| c.tls.is_some())
}

/// Every certificate of a PEM file; an error if it holds none.
fn certificates(path: &PathBuf) -> Result<Vec<CertificateDer<'static>>, String> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .map_err(|e| format!("{}: {e}", path.display()))?;
    if certs.is_empty() {
        return Err(format!("{}: holds no PEM certificate", path.display()));
    }
    Ok(certs)
}

/// The system's roots, as fred loads them for a plain `rediss://` URL
/// (`SSL_CERT_FILE` and `SSL_CERT_DIR` are honoured).
fn system_roots() -> Result<RootCertStore, String> {
    let found = rustls_native_certs::load_native_certs();
    let mut roots = RootCertStore::empty();
    roots.add_parsable_certificates(found.certs);
    if roots.is_empty() {
        return Err(format!(
            "tls: no system root certificate could be read ({:?}); give a ca_file",
            found.errors
        ));
    }
    Ok(roots)
}
