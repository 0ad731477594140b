//! What connecting to NATS takes from `[nats]`: TLS, the one way it authenticates (each secret
//! read from its file once), and those as async-nats's options and as the CONNECT fields of
//! the relay's own links.

use std::sync::Arc;

use super::config::NatsConfig;
use crate::secret::Secret;
use crate::tls::TlsMode;

/// Why the client could not be set up: the configuration's fault (an unreachable server is not:
/// the client keeps trying). Names the key, never a secret.
#[derive(Debug, thiserror::Error)]
pub enum NatsSetupError {
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    #[error("{key}: cannot read {}: {detail}", file.display())]
    Unreadable { key: &'static str, file: std::path::PathBuf, detail: String },
    #[error("nats.url: {0}")]
    Url(String),
}

/// The contents of the secret file `file` (set under `key`), trimmed.
fn secret(key: &'static str, file: &std::path::Path) -> Result<String, NatsSetupError> {
    let text = std::fs::read_to_string(file).map_err(|e| NatsSetupError::Unreadable {
        key,
        file: file.to_owned(),
        detail: e.kind().to_string(),
    })?;
    Ok(text.trim().to_owned())
}

/// The TLS client configuration `config` asks for, if it asks for TLS (verified unless its mode
/// says otherwise).
pub(super) fn tls(config: &NatsConfig) -> Result<Option<Arc<rustls::ClientConfig>>, NatsSetupError> {
    if !config.tls_required() {
        return Ok(None);
    }
    let mode = config.tls.mode_or(TlsMode::VerifyFull);
    Ok(Some(Arc::new(crate::tls::client_config("nats.tls", mode, &config.tls)?)))
}

/// The one way `config` authenticates, each secret read from its file.
pub(super) fn auth(config: &NatsConfig) -> Result<Auth, NatsSetupError> {
    let unreadable =
        |key, file: &std::path::Path, detail: String| NatsSetupError::Unreadable { key, file: file.to_owned(), detail };
    if let Some(file) = &config.token_file {
        return Ok(Auth::Token(Secret::new(secret("nats.token_file", file)?)));
    }
    if let (Some(user), Some(file)) = (&config.user, &config.password_file) {
        let password = Secret::new(secret("nats.password_file", file)?);
        return Ok(Auth::User { user: user.clone(), password });
    }
    if let Some(file) = &config.nkey_file {
        let seed = Secret::new(secret("nats.nkey_file", file)?);
        let key = nkeys::KeyPair::from_seed(seed.expose())
            .map_err(|_| unreadable("nats.nkey_file", file, "it holds no NKey seed".into()))?;
        return Ok(Auth::Nkey { seed, key: Arc::new(key) });
    }
    if let Some(file) = &config.credentials_file {
        let text = secret("nats.credentials_file", file)?;
        return Auth::credentials(&text).map_err(|e| unreadable("nats.credentials_file", file, e));
    }
    Ok(Auth::None)
}

/// async-nats's connect options for `auth` over `tls`.
pub(super) fn options(auth: &Auth, tls: Option<&Arc<rustls::ClientConfig>>) -> async_nats::ConnectOptions {
    let mut options = async_nats::ConnectOptions::new().name("handoff");
    if let Some(tls) = tls {
        options = options.require_tls(true).tls_client_config(rustls::ClientConfig::clone(tls));
    }
    match auth {
        Auth::None => options,
        Auth::Token(token) => options.token(token.expose().to_owned()),
        Auth::User { user, password } => options.user_and_password(user.clone(), password.expose().to_owned()),
        Auth::Nkey { seed, .. } => options.nkey(seed.expose().to_owned()),
        Auth::Credentials { jwt, key } => {
            let key = key.clone();
            options.jwt(jwt.clone(), move |nonce| {
                let key = key.clone();
                async move { key.sign(&nonce).map_err(async_nats::AuthError::new) }
            })
        }
    }
}

/// How a link proves who it is, each secret read from its file once.
pub(super) enum Auth {
    None,
    Token(Secret),
    User {
        user: String,
        password: Secret,
    },
    /// An NKey seed: the server's nonce is signed with it.
    Nkey {
        seed: Secret,
        key: Arc<nkeys::KeyPair>,
    },
    /// A `.creds` file: its user JWT, and its seed to sign the nonce.
    Credentials {
        jwt: String,
        key: Arc<nkeys::KeyPair>,
    },
}

impl Auth {
    /// The user JWT and NKey seed of a `.creds` file (as `nsc` writes it: each between a
    /// `-----BEGIN …-----` and an `------END …------` line), or what is missing.
    fn credentials(text: &str) -> Result<Self, String> {
        let mut blocks = Vec::new();
        let mut lines = text.lines().map(str::trim);
        while let Some(line) = lines.next() {
            if line.starts_with("---") && line.contains("BEGIN") {
                blocks.push(lines.next().unwrap_or_default());
            }
        }
        let (Some(jwt), Some(seed)) = (blocks.first().filter(|b| !b.is_empty()), blocks.get(1)) else {
            return Err("no user JWT and NKey seed blocks".into());
        };
        let key = nkeys::KeyPair::from_seed(seed).map_err(|_| "its NKey seed is not one".to_owned())?;
        Ok(Auth::Credentials { jwt: (*jwt).to_owned(), key: Arc::new(key) })
    }

    /// The CONNECT fields that authenticate (a link's handshake), the nonce signed where a key
    /// is used.
    pub(super) fn fields(&self, nonce: &str) -> Result<serde_json::Map<String, serde_json::Value>, SignError> {
        let mut fields = serde_json::Map::new();
        let sign = |key: &nkeys::KeyPair| {
            key.sign(nonce.as_bytes()).map(|s| crate::base64::encode_url(&s)).map_err(|_| SignError)
        };
        match self {
            Auth::None => {}
            Auth::Token(token) => {
                fields.insert("auth_token".into(), token.expose().into());
            }
            Auth::User { user, password } => {
                fields.insert("user".into(), user.clone().into());
                fields.insert("pass".into(), password.expose().into());
            }
            Auth::Nkey { key, .. } => {
                fields.insert("nkey".into(), key.public_key().into());
                fields.insert("sig".into(), sign(key)?.into());
            }
            Auth::Credentials { jwt, key } => {
                fields.insert("jwt".into(), jwt.clone().into());
                fields.insert("sig".into(), sign(key)?.into());
            }
        }
        Ok(fields)
    }
}

/// A server's nonce could not be signed with the configured key.
#[derive(Debug)]
pub(super) struct SignError;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_credentials_file_gives_its_jwt_and_seed_and_a_broken_one_says_so() {
        let seed = nkeys::KeyPair::new_user().seed().unwrap();
        let creds = format!(
            "-----BEGIN NATS USER JWT-----\neyJ0eXAi.payload.sig\n------END NATS USER JWT------\n\n\
             ************************* IMPORTANT *************************\n\
             -----BEGIN USER NKEY SEED-----\n{seed}\n------END USER NKEY SEED------\n"
        );
        let Ok(Auth::Credentials { jwt, key }) = Auth::credentials(&creds) else { panic!("parsed") };
        assert_eq!(jwt, "eyJ0eXAi.payload.sig");
        let fields = Auth::Credentials { jwt, key }.fields("nonce").unwrap();
        assert_eq!(fields["jwt"], "eyJ0eXAi.payload.sig");
        assert!(fields["sig"].as_str().is_some_and(|s| !s.contains(['=', '+', '/'])), "URL-safe, unpadded");
        assert!(Auth::credentials("-----BEGIN NATS USER JWT-----\nabc\n").is_err());
        assert!(Auth::credentials(&creds.replace(&seed, "SUnotaseed")).is_err());
    }
}
