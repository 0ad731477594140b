//! Minimal HTTP/1.1 for tests: a GET for scraping the telemetry listener, and reading one
//! request on a receiver's side.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;

/// `(status code, body)` of `GET http://{address}{path}`.
pub fn get(address: &str, path: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).expect("connect to the telemetry listener");
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}

/// Like [`get`], as a probe does it: `None` when the listener does not answer within a second
/// (Kubernetes' default probe timeout), connecting included.
pub fn try_get(address: &str, path: &str) -> Option<(u16, String)> {
    let timeout = std::time::Duration::from_secs(1);
    let addr: std::net::SocketAddr = address.parse().ok()?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout).ok()?;
    stream.set_read_timeout(Some(timeout)).ok()?;
    stream.set_write_timeout(Some(timeout)).ok()?;
    write!(stream, "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n").ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).ok()?;
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok())?;
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    Some((status, body))
}

/// The value of the sample whose line starts with `series` (name plus exact label set), if any.
pub fn sample(metrics: &str, series: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|line| line.split_whitespace().next() == Some(series))
        .and_then(|line| line.split_whitespace().nth(1))
        .and_then(|v| v.parse().ok())
}

/// Reads one request: a header lookup and the JSON body.
pub fn read_request(stream: &std::net::TcpStream) -> (impl Fn(&str) -> String + use<>, serde_json::Value) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        headers.push(line.trim().to_owned());
    }
    let header = move |name: &str| {
        headers
            .iter()
            .find_map(|h| {
                h.split_once(':').filter(|(k, _)| k.eq_ignore_ascii_case(name)).map(|(_, v)| v.trim().to_owned())
            })
            .unwrap_or_default()
    };
    let length: usize = header("content-length").parse().unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).unwrap();
    (header, serde_json::from_slice(&body).unwrap())
}

/// `(status code, body)` of a request to `http://{address}{path}` with `headers` and `body`.
pub fn request(address: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(address).expect("connect");
    let mut head = format!("{method} {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n");
    for (name, value) in headers {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    if !headers.iter().any(|(name, _)| name.eq_ignore_ascii_case("content-type")) {
        head.push_str("Content-Type: application/json\r\n");
    }
    head.push_str(&format!("Content-Length: {}\r\n", body.len()));
    write!(stream, "{head}\r\n{body}").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let status = response.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    let body = response.split_once("\r\n\r\n").map(|(_, b)| b.to_owned()).unwrap_or_default();
    (status, body)
}
