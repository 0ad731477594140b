//! Responses: a body, its content type, never cached.

use http_body_util::Full;
use hyper::body::Bytes;

/// A response with a body and its content type.
pub(super) fn response(status: hyper::StatusCode, content_type: &str, body: String) -> hyper::Response<Full<Bytes>> {
    let mut response = hyper::Response::new(Full::new(Bytes::from(body)));
    *response.status_mut() = status;
    if let Ok(value) = hyper::header::HeaderValue::from_str(content_type) {
        response.headers_mut().insert(hyper::header::CONTENT_TYPE, value);
    }
    response.headers_mut().insert(hyper::header::CACHE_CONTROL, hyper::header::HeaderValue::from_static("no-store"));
    response
}
