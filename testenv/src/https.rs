//! An HTTPS endpoint of a running server ([`crate::ServerHandle::serve_https`]): the same
//! store, hooks and request log as its plain-HTTP one, behind a certificate of a throw-away CA
//! (rcgen, ECDSA P-256, ring) for `127.0.0.1` and `localhost`.
//!
//! kubectl (client-go's `clientcmd`) sends a kubeconfig's credentials (bearer token, client
//! certificate) only to servers reached over TLS; over plain HTTP every request is
//! `system:anonymous`. Tests that drive kubectl as a particular user use this endpoint.

use std::{net::SocketAddr, sync::Arc, time::Duration};

use axum::serve::Listener;
use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair,
    KeyUsagePurpose,
};
use rustls_pki_types::{CertificateDer, PrivateKeyDer, pem::PemObject};
use tokio::{
    net::{TcpListener, TcpStream},
    sync::mpsc,
};
use tokio_rustls::{TlsAcceptor, server::TlsStream};

use crate::server::Shared;

/// An HTTPS endpoint: its URL and the CA certificate (PEM) that clients trust for it.
#[derive(Clone, Debug)]
pub struct HttpsEndpoint {
    /// `https://127.0.0.1:<port>`.
    pub url: String,
    /// The CA that signed the serving certificate.
    pub ca_pem: String,
}

/// A self-made CA and a serving certificate for `127.0.0.1` and `localhost`.
struct Certs {
    ca_pem: String,
    chain: Vec<CertificateDer<'static>>,
    key: PrivateKeyDer<'static>,
}

fn certs() -> Result<Certs, rcgen::Error> {
    let ca_key = KeyPair::generate()?;
    let mut ca = CertificateParams::new(Vec::<String>::new())?;
    ca.is_ca = IsCa::Ca(BasicConstraints::Constrained(0));
    ca.distinguished_name
        .push(DnType::CommonName, "testenv API server CA");
    ca.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    let ca_cert = ca.self_signed(&ca_key)?;
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate()?;
    let mut leaf = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    leaf.distinguished_name
        .push(DnType::CommonName, "testenv API server");
    leaf.is_ca = IsCa::ExplicitNoCa;
    leaf.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    leaf.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = leaf.signed_by(&key, &issuer)?;
    Ok(Certs {
        ca_pem: ca_cert.pem(),
        chain: vec![cert.der().clone(), ca_cert.der().clone()],
        key: PrivateKeyDer::from_pem_slice(key.serialize_pem().as_bytes())
            .map_err(|_| rcgen::Error::CouldNotParseKeyPair)?,
    })
}

/// Accepts TCP connections and hands out those whose TLS handshake finished (handshakes run
/// concurrently, each bounded by 10 s, so one slow client holds up no other).
struct TlsListener {
    local: SocketAddr,
    ready: mpsc::Receiver<(TlsStream<TcpStream>, SocketAddr)>,
}

impl Listener for TlsListener {
    type Io = TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        match self.ready.recv().await {
            Some(conn) => conn,
            // The accept loop ended (server shut down): accept nothing more.
            None => std::future::pending().await,
        }
    }

    fn local_addr(&self) -> std::io::Result<Self::Addr> {
        Ok(self.local)
    }
}

/// Binds `127.0.0.1:0` and serves `app` over TLS until the server shuts down.
pub(crate) async fn serve(
    shared: Arc<Shared>,
    app: axum::Router,
) -> std::io::Result<HttpsEndpoint> {
    let certs = certs().map_err(std::io::Error::other)?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(std::io::Error::other)?
        .with_no_client_auth()
        .with_single_cert(certs.chain, certs.key)
        .map_err(std::io::Error::other)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = TlsAcceptor::from(Arc::new(config));
    let tcp = TcpListener::bind("127.0.0.1:0").await?;
    let local = tcp.local_addr()?;
    let (tx, rx) = mpsc::channel(64);
    let mut stop = shared.shutdown.clone();
    tokio::spawn(async move {
        loop {
            let accepted = tokio::select! {
                a = tcp.accept() => a,
                _ = stop.wait_for(|s| *s) => return,
            };
            let (stream, peer) = match accepted {
                Ok(x) => x,
                Err(e) => {
                    tracing::debug!("testenv https: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    continue;
                }
            };
            let _ = stream.set_nodelay(true);
            let (acceptor, tx) = (acceptor.clone(), tx.clone());
            tokio::spawn(async move {
                match tokio::time::timeout(Duration::from_secs(10), acceptor.accept(stream)).await {
                    Ok(Ok(tls)) => {
                        let _ = tx.send((tls, peer)).await;
                    }
                    Ok(Err(e)) => tracing::debug!("testenv https: handshake with {peer}: {e}"),
                    Err(_) => tracing::debug!("testenv https: handshake with {peer} timed out"),
                }
            });
        }
    });
    let listener = TlsListener { local, ready: rx };
    let mut stop = shared.shutdown.clone();
    tokio::spawn(async move {
        let served = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop.wait_for(|s| *s).await;
            })
            .await;
        if let Err(e) = served {
            tracing::warn!("testenv https server stopped: {e}");
        }
    });
    Ok(HttpsEndpoint {
        url: format!("https://{local}"),
        ca_pem: certs.ca_pem,
    })
}
