//! An HTTP(S) client for a configured endpoint — an HTTP handler, the OTLP collector: its URL
//! (http:// or https:// only), TLS from its `tls` table, and its request headers.

use bytes::Bytes;
use http_body_util::Full;
use hyper::Uri;
use hyper::header::{HeaderMap, HeaderName, HeaderValue};
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;

use super::{TlsError, client_config};
use crate::tls::{TlsConfig, TlsMode};

pub(crate) type HttpsClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// Why an endpoint's settings cannot be used; each names the key at fault.
#[derive(Debug, thiserror::Error)]
pub(crate) enum EndpointError {
    /// `shown`: the URL as it may be shown (credentials redacted).
    #[error("{key} is not a valid URL ({shown})")]
    Url { key: String, shown: String },
    #[error("{key} must be an http:// or https:// URL")]
    Scheme { key: String },
    #[error(transparent)]
    Tls(#[from] TlsError),
    #[error("{path}.headers.{name}: {detail}")]
    Header { path: String, name: String, detail: String },
}

/// A client for `url` (the value of key `path`.`key`, shown as `shown` in errors) with the TLS
/// settings of `path`.tls; the URL parsed.
pub(crate) fn client(
    path: &str,
    key: &str,
    url: &str,
    shown: &str,
    tls: &TlsConfig,
) -> Result<(Uri, HttpsClient), EndpointError> {
    let key = format!("{path}.{key}");
    // The parser's message would quote the URL: name the key only (it may hold credentials).
    let uri: Uri = url.parse().map_err(|_| EndpointError::Url { key: key.clone(), shown: shown.to_owned() })?;
    let https = match uri.scheme_str() {
        Some("http") => false,
        Some("https") => true,
        _ => return Err(EndpointError::Scheme { key }),
    };
    // An http:// endpoint never uses the TLS settings; the connector still needs some.
    let mode = if https { tls.mode_or(TlsMode::VerifyFull) } else { TlsMode::Require };
    let tls = client_config(&format!("{path}.tls"), mode, tls)?;
    let builder = hyper_rustls::HttpsConnectorBuilder::new().with_tls_config(tls);
    let connector = if https {
        builder.https_only().enable_http1().build()
    } else {
        builder.https_or_http().enable_http1().build()
    };
    Ok((uri, Client::builder(TokioExecutor::new()).build(connector)))
}

/// `uri` without its `user:password@`, and those credentials as an `Authorization: Basic`
/// value (marked sensitive): the HTTP client sends no credentials from a URL by itself. The
/// password may be percent-encoded, as in any URL.
pub(crate) fn basic_auth_from(uri: Uri) -> (Uri, Option<HeaderValue>) {
    let Some(authority) = uri.authority().cloned() else { return (uri, None) };
    let Some((userinfo, host)) = authority.as_str().rsplit_once('@') else { return (uri, None) };
    let (user, password) = userinfo.split_once(':').unwrap_or((userinfo, ""));
    let credentials = format!("{}:{}", crate::percent::decode(user), crate::percent::decode(password));
    let mut value = HeaderValue::from_str(&format!("Basic {}", crate::base64::encode(credentials.as_bytes())))
        .expect("base64 is a valid header value");
    value.set_sensitive(true);
    let mut parts = uri.into_parts();
    parts.authority = host.parse().ok();
    let uri = Uri::from_parts(parts).expect("the same URI without its userinfo");
    (uri, Some(value))
}

/// JSON requests' headers: `Content-Type: application/json`, then `pairs` (`path`.headers).
pub(crate) fn json_headers<'a>(
    path: &str,
    pairs: impl Iterator<Item = (&'a str, &'a str)>,
) -> Result<HeaderMap, EndpointError> {
    let mut headers = HeaderMap::new();
    headers.insert(hyper::header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    for (name, value) in pairs {
        let invalid = |detail: String| EndpointError::Header { path: path.to_owned(), name: name.to_owned(), detail };
        let header = HeaderName::from_bytes(name.as_bytes()).map_err(|e| invalid(e.to_string()))?;
        let value = HeaderValue::from_str(value).map_err(|e| invalid(e.to_string()))?;
        headers.insert(header, value);
    }
    Ok(headers)
}
