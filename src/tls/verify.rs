//! Server certificate checks other than rustls's own: for the modes below `verify-full`,
//! `verify-ca` verifies the chain but not the host name, `require` / `prefer` check only that the
//! handshake's signatures are made by the certificate presented (encryption without
//! authentication, as libpq does); and `verify-full` against a configured `server_name` instead
//! of the host connected to.

use std::sync::Arc;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};

/// A server certificate check weaker than `verify-full`.
#[derive(Debug)]
pub struct Lenient {
    /// `verify-ca`: the chain must lead to a trusted CA (a name mismatch is accepted); `None`
    /// for `require` / `prefer`: any certificate is accepted.
    chain: Option<Arc<WebPkiServerVerifier>>,
    provider: Arc<CryptoProvider>,
}

impl Lenient {
    /// `verify-ca` against `roots`.
    pub fn chain_only(
        roots: RootCertStore,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, rustls::client::VerifierBuilderError> {
        let chain = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()?;
        Ok(Self { chain: Some(chain), provider })
    }

    /// `require` / `prefer`.
    pub fn unverified(provider: Arc<CryptoProvider>) -> Self {
        Self { chain: None, provider }
    }
}

impl ServerCertVerifier for Lenient {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        let Some(chain) = &self.chain else { return Ok(ServerCertVerified::assertion()) };
        // webpki checks the chain (and validity, usage) before the name, so a name error means
        // everything else held.
        match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now) {
            Err(Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls12_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        verify_tls13_signature(message, cert, dss, &self.provider.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider.signature_verification_algorithms.supported_schemes()
    }
}

/// `verify-full` for another name than the host connected to (`tls.server_name`): the whole
/// check, chain and name, with that name.
#[derive(Debug)]
pub struct Renamed {
    full: Arc<WebPkiServerVerifier>,
    name: ServerName<'static>,
}

impl Renamed {
    pub fn new(
        roots: RootCertStore,
        provider: Arc<CryptoProvider>,
        name: &str,
    ) -> Result<Self, rustls::client::VerifierBuilderError> {
        let full = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider).build()?;
        // The configuration's check refused a name that does not parse; an IP literal is kept too.
        let name = ServerName::try_from(name.to_owned())
            .unwrap_or_else(|_| ServerName::try_from("invalid.invalid".to_owned()).expect("a DNS name"));
        Ok(Self { full, name })
    }
}

impl ServerCertVerifier for Renamed {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        self.full.verify_server_cert(end_entity, intermediates, &self.name, ocsp, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.full.verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, Error> {
        self.full.verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.full.supported_verify_schemes()
    }
}
