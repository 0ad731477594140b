//! Server certificate checks other than rustls's own: for the modes below `verify-full`,
//! `verify-ca` verifies the chain but not the host name, `require` / `prefer` check only that the
//! handshake's signatures are made by the certificate presented (encryption without
//! authentication, as libpq does); and `verify-full` against a configured `server_name` instead
//! of the host connected to.

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::client::{VerifierBuilderError, WebPkiServerVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, Error, RootCertStore, SignatureScheme};

/// A server certificate check other than rustls's default. Every rule checks the handshake's
/// signatures against the certificate presented; they differ in what they ask of the certificate.
#[derive(Debug)]
pub(super) struct Verifier {
    rule: Rule,
    provider: Arc<CryptoProvider>,
}

#[derive(Debug)]
enum Rule {
    /// `require` / `prefer`: any certificate is accepted.
    AnyCertificate,
    /// `verify-ca`: the chain must lead to a trusted CA; a name mismatch is accepted.
    ChainOnly(Arc<WebPkiServerVerifier>),
    /// `verify-full` with `tls.server_name`: chain and name, the name being this one.
    Renamed(Arc<WebPkiServerVerifier>, ServerName<'static>),
}

impl Verifier {
    /// `require` / `prefer`.
    pub(super) fn unverified(provider: Arc<CryptoProvider>) -> Self {
        Self { rule: Rule::AnyCertificate, provider }
    }

    /// `verify-ca` against `roots`.
    pub(super) fn chain_only(
        roots: RootCertStore,
        provider: Arc<CryptoProvider>,
    ) -> Result<Self, VerifierBuilderError> {
        let chain = webpki(roots, &provider)?;
        Ok(Self { rule: Rule::ChainOnly(chain), provider })
    }

    /// `verify-full` against `roots` for `name` rather than the host connected to.
    pub(super) fn renamed(
        roots: RootCertStore,
        provider: Arc<CryptoProvider>,
        name: &str,
    ) -> Result<Self, VerifierBuilderError> {
        let full = webpki(roots, &provider)?;
        // The configuration's check refused a name that does not parse; an IP literal is kept too.
        let name = ServerName::try_from(name.to_owned())
            .unwrap_or_else(|_| ServerName::try_from("invalid.invalid".to_owned()).expect("a DNS name"));
        Ok(Self { rule: Rule::Renamed(full, name), provider })
    }
}

fn webpki(
    roots: RootCertStore,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, VerifierBuilderError> {
    WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider.clone()).build()
}

impl ServerCertVerifier for Verifier {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, Error> {
        match &self.rule {
            Rule::AnyCertificate => Ok(ServerCertVerified::assertion()),
            // webpki checks the chain (and validity, usage) before the name, so a name error
            // means everything else held.
            Rule::ChainOnly(chain) => match chain.verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
            {
                Err(Error::InvalidCertificate(
                    CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
                )) => Ok(ServerCertVerified::assertion()),
                other => other,
            },
            Rule::Renamed(full, name) => full.verify_server_cert(end_entity, intermediates, name, ocsp, now),
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
