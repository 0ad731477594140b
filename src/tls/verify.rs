//! Server certificate checks for the modes below `verify-full`: `verify-ca` verifies the chain
//! but not the host name; `require` / `prefer` check only that the handshake's signatures are
//! made by the certificate presented (encryption without authentication, as libpq does).

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
