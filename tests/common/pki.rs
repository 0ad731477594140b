//! A throwaway certificate authority made at test time (rcgen): a CA, a server certificate for
//! `localhost` only (so connecting by `127.0.0.1` is a wrong host name), a client certificate
//! for the user `certuser`, and a second, unrelated CA (the wrong one). PEM files in a temporary
//! directory any user can read (the Postgres server runs as `postgres`).

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

pub struct Pki {
    pub dir: tempfile::TempDir,
    pub ca: PathBuf,
    /// A CA that signed nothing the servers present.
    pub other_ca: PathBuf,
    pub server_cert: PathBuf,
    pub server_key: PathBuf,
    pub client_cert: PathBuf,
    pub client_key: PathBuf,
}

impl Pki {
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let ca = authority("handoff test CA");
        let other = authority("some other CA");
        // Redis uses its server certificate for its own outgoing cluster-bus connections too.
        let server = leaf(
            &["localhost"],
            "localhost",
            &[ExtendedKeyUsagePurpose::ServerAuth, ExtendedKeyUsagePurpose::ClientAuth],
            &ca,
        );
        let client = leaf(&[], "certuser", &[ExtendedKeyUsagePurpose::ClientAuth], &ca);
        let write = |name: &str, text: &str| {
            let path = dir.path().join(name);
            std::fs::write(&path, text).unwrap();
            path
        };
        let pki = Self {
            ca: write("ca.crt", &ca.pem()),
            other_ca: write("other-ca.crt", &other.pem()),
            server_cert: write("server.crt", &server.0),
            server_key: write("server.key", &server.1),
            client_cert: write("client.crt", &client.0),
            client_key: write("client.key", &client.1),
            dir,
        };
        open_to_everyone(pki.dir.path());
        pki
    }
}

fn authority(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign, KeyUsagePurpose::DigitalSignature];
    params.distinguished_name.push(DnType::CommonName, name);
    CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap()
}

/// (certificate PEM, key PEM) signed by `ca`.
fn leaf(
    names: &[&str],
    common_name: &str,
    usages: &[ExtendedKeyUsagePurpose],
    ca: &CertifiedIssuer<'static, KeyPair>,
) -> (String, String) {
    let key = KeyPair::generate().unwrap();
    let mut params = CertificateParams::new(names.iter().map(|n| n.to_string()).collect::<Vec<_>>()).unwrap();
    params.distinguished_name.push(DnType::CommonName, common_name);
    params.extended_key_usages = usages.to_vec();
    let cert = params.signed_by(&key, ca).unwrap();
    (cert.pem(), key.serialize_pem())
}

/// Servers started as another user must read the files (keys they use get copied with the
/// permissions the server insists on).
fn open_to_everyone(dir: &Path) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
}
