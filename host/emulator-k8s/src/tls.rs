//! The server's TLS identity: a self-signed CA and a server certificate for
//! `127.0.0.1`/`localhost` (plus the listen address), made with rcgen at every start.
//! kubectl sends no bearer token to an `http://` server, so HTTPS is what lets the token
//! be checked at all.

use std::net::IpAddr;
use std::sync::Arc;

use anyhow::Context;
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose, SanType,
};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};

/// A CA and the server certificate it signed.
pub(crate) struct Identity {
    /// The CA certificate (PEM), embedded in the kubeconfig.
    pub(crate) ca_pem: String,
    server_chain: Vec<CertificateDer<'static>>,
    server_key: PrivatePkcs8KeyDer<'static>,
}

impl Identity {
    /// Make a fresh CA and a server certificate valid for `localhost`, `127.0.0.1` and `extra_ip`.
    ///
    /// # Errors
    /// When key generation or signing fails.
    pub(crate) fn generate(extra_ip: Option<IpAddr>) -> anyhow::Result<Self> {
        let ca_key = KeyPair::generate().context("generating the CA key")?;
        let mut ca_params = CertificateParams::new(Vec::<String>::new())?;
        ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca_params
            .distinguished_name
            .push(DnType::CommonName, "sandfleet-devcluster-ca");
        ca_params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca = CertifiedIssuer::self_signed(ca_params, ca_key).context("self-signing the CA")?;

        let server_key = KeyPair::generate().context("generating the server key")?;
        let mut params =
            CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()])?;
        if let Some(ip) = extra_ip
            && ip != IpAddr::from([127, 0, 0, 1])
        {
            params.subject_alt_names.push(SanType::IpAddress(ip));
        }
        params
            .distinguished_name
            .push(DnType::CommonName, "sandfleet-devcluster-apiserver");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        params.key_usages = vec![
            KeyUsagePurpose::DigitalSignature,
            KeyUsagePurpose::KeyEncipherment,
        ];
        let cert = params
            .signed_by(&server_key, &ca)
            .context("signing the server certificate")?;
        Ok(Self {
            ca_pem: ca.pem(),
            server_chain: vec![cert.der().clone(), ca.der().clone()],
            server_key: PrivatePkcs8KeyDer::from(server_key.serialize_der()),
        })
    }

    /// A rustls server configuration (ring provider) offering HTTP/2 and HTTP/1.1,
    /// and sessions resumed by stateless tickets.
    ///
    /// # Errors
    /// When rustls rejects the key.
    pub(crate) fn server_config(&self) -> anyhow::Result<Arc<rustls::ServerConfig>> {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .context("TLS protocol versions")?
            .with_no_client_auth()
            .with_single_cert(
                self.server_chain.clone(),
                PrivateKeyDer::Pkcs8(self.server_key.clone_key()),
            )
            .context("loading the server certificate")?;
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        // Stateless session tickets, as Go's crypto/tls (and so
        // kube-apiserver) issues them: every exec websocket is a connection
        // of its own, and a client that resumes skips the certificate's
        // signature and checks. rustls's default, a cache of 256 sessions,
        // would evict the tickets of a burst of 256 execs before they are
        // used.
        config.ticketer =
            rustls::crypto::ring::Ticketer::new().context("making the session ticketer")?;
        config.send_tls13_tickets = 1;
        Ok(Arc::new(config))
    }
}
