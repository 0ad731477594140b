//! Who calls the admin listener: a bearer token, or basic authentication with the token's name
//! as the user and the token as the password (what a browser asks for on the status page).
//! Tokens are compared in time that does not depend on where they differ.

use hyper::header::HeaderValue;

use crate::config::admin::{AdminToken, Scope};

/// An authenticated caller.
#[derive(Debug, Clone)]
pub(super) struct Caller {
    pub name: String,
    pub scope: Scope,
    /// How the token was presented: only a bearer token may mutate (`guard`).
    pub scheme: Scheme,
}

/// How a caller presented its token.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Scheme {
    Bearer,
    /// Basic authentication, which a browser remembers and sends by itself.
    Basic,
}

impl Caller {
    pub(super) fn may_write(&self) -> bool {
        self.scope == Scope::Write
    }
}

/// The caller the `Authorization` header proves, if it proves one.
pub(super) fn authenticate(tokens: &[AdminToken], header: Option<&HeaderValue>) -> Option<Caller> {
    let given = header?.to_str().ok()?;
    let caller = |scheme| move |t: &AdminToken| Caller { name: t.name.clone(), scope: t.scope, scheme };
    if let Some(bearer) = given.strip_prefix("Bearer ") {
        return tokens
            .iter()
            .find(|t| t.token.as_ref().is_some_and(|secret| secret.matches(bearer.trim())))
            .map(caller(Scheme::Bearer));
    }
    let basic = crate::base64::decode(given.strip_prefix("Basic ")?.trim())?;
    let (user, password) = std::str::from_utf8(&basic).ok()?.split_once(':')?;
    tokens
        .iter()
        .filter(|t| t.name == user)
        .find(|t| t.token.as_ref().is_some_and(|secret| secret.matches(password)))
        .map(caller(Scheme::Basic))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::secret::Secret;

    fn token(name: &str, scope: Scope, secret: &str) -> AdminToken {
        AdminToken { name: name.into(), scope, token_file: "/dev/null".into(), token: Some(Secret::new(secret)) }
    }

    #[test]
    fn a_bearer_or_basic_token_proves_its_name_and_scope_and_nothing_else_does() {
        let tokens =
            [token("oncall", Scope::Read, "read-token-0123456"), token("ops", Scope::Write, "write-token-0123456")];
        let header = |v: &str| HeaderValue::from_str(v).unwrap();
        let caller = authenticate(&tokens, Some(&header("Bearer write-token-0123456"))).unwrap();
        assert_eq!((caller.name.as_str(), caller.may_write()), ("ops", true));
        let basic = format!("Basic {}", crate::base64::encode(b"oncall:read-token-0123456"));
        assert!(!authenticate(&tokens, Some(&header(&basic))).unwrap().may_write());
        let wrong_user = format!("Basic {}", crate::base64::encode(b"ops:read-token-0123456"));
        assert!(authenticate(&tokens, Some(&header(&wrong_user))).is_none(), "a token proves only its own name");
        assert!(authenticate(&tokens, Some(&header("Bearer write-token-012345"))).is_none());
        assert!(authenticate(&tokens, None).is_none());
    }
}
