//! What a mutation must carry that a web page cannot make a browser send to another site: a
//! bearer token (a browser attaches remembered basic credentials to any request to the
//! listener, so they only read), a JSON body declared as such (a form or a `text/plain` fetch
//! cannot set `Content-Type: application/json` without a preflight the listener never answers),
//! and no sign of another origin (`Origin`, `Sec-Fetch-Site`). The status page is read-only.

use hyper::StatusCode;
use hyper::header::{CONTENT_TYPE, HOST, HeaderMap, ORIGIN};

use super::auth::Scheme;

/// Why a mutation is refused before it is read, or `None` when it may go on.
pub(super) fn refusal(headers: &HeaderMap, scheme: Scheme) -> Option<(StatusCode, String)> {
    if scheme != Scheme::Bearer {
        let why = "mutations need a bearer token (Authorization: Bearer …); basic credentials, which a browser sends by itself, only read";
        return Some((StatusCode::FORBIDDEN, why.into()));
    }
    if let Some(site) = text(headers, "sec-fetch-site")
        && !matches!(site, "same-origin" | "none")
    {
        return Some((StatusCode::FORBIDDEN, format!("cross-site request refused (Sec-Fetch-Site: {site})")));
    }
    if let Some(origin) = headers.get(ORIGIN) {
        let origin = origin.to_str().unwrap_or_default();
        let host = text(headers, HOST.as_str()).unwrap_or_default();
        if !same_origin(origin, host) {
            return Some((StatusCode::FORBIDDEN, format!("cross-origin request refused (Origin: {origin})")));
        }
    }
    let json = text(headers, CONTENT_TYPE.as_str())
        .and_then(|t| t.split(';').next())
        .is_some_and(|t| t.trim().eq_ignore_ascii_case("application/json"));
    if !json {
        let why = "a mutation's body must be JSON, sent with Content-Type: application/json";
        return Some((StatusCode::UNSUPPORTED_MEDIA_TYPE, why.into()));
    }
    None
}

fn text<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// Whether `origin` (`scheme://host[:port]`) names the host the request was sent to.
fn same_origin(origin: &str, host: &str) -> bool {
    let Some((_, authority)) = origin.split_once("://") else { return false };
    !host.is_empty() && authority.eq_ignore_ascii_case(host)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        pairs.iter().map(|(k, v)| (hyper::header::HeaderName::from_static(k), v.parse().unwrap())).collect()
    }

    const JSON: (&str, &str) = ("content-type", "application/json");

    #[test]
    fn what_a_browser_sends_cross_site_is_refused() {
        let form = headers(&[("content-type", "application/x-www-form-urlencoded"), ("host", "admin:9091")]);
        assert_eq!(refusal(&form, Scheme::Bearer).unwrap().0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let plain = headers(&[("content-type", "text/plain"), ("host", "admin:9091")]);
        assert_eq!(refusal(&plain, Scheme::Bearer).unwrap().0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let none = headers(&[("host", "admin:9091")]);
        assert_eq!(refusal(&none, Scheme::Bearer).unwrap().0, StatusCode::UNSUPPORTED_MEDIA_TYPE);
        let remembered = headers(&[JSON, ("host", "admin:9091")]);
        let (status, why) = refusal(&remembered, Scheme::Basic).unwrap();
        assert!(status == StatusCode::FORBIDDEN && why.contains("bearer token"), "{why}");
        let evil = headers(&[JSON, ("host", "admin:9091"), ("origin", "http://evil.example")]);
        let (status, why) = refusal(&evil, Scheme::Bearer).unwrap();
        assert!(status == StatusCode::FORBIDDEN && why.contains("evil.example"), "{why}");
        let opaque = headers(&[JSON, ("host", "admin:9091"), ("origin", "null")]);
        assert!(refusal(&opaque, Scheme::Bearer).is_some());
        let fetched = headers(&[JSON, ("host", "admin:9091"), ("sec-fetch-site", "same-site")]);
        assert!(refusal(&fetched, Scheme::Bearer).unwrap().1.contains("Sec-Fetch-Site: same-site"));
    }

    #[test]
    fn a_script_or_the_page_s_own_origin_may_mutate() {
        let curl = headers(&[("content-type", "application/json; charset=utf-8"), ("host", "127.0.0.1:9091")]);
        assert_eq!(refusal(&curl, Scheme::Bearer), None);
        let same = headers(&[
            JSON,
            ("host", "admin:9091"),
            ("origin", "https://admin:9091"),
            ("sec-fetch-site", "same-origin"),
        ]);
        assert_eq!(refusal(&same, Scheme::Bearer), None);
    }
}
