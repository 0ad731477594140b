//! Percent-decoding, for the text URLs carry: a query string's values, a URL's credentials and
//! TLS words (`sslrootcert=%2Fetc…`), `OTEL_EXPORTER_OTLP_HEADERS` values; and percent-encoding,
//! for CloudEvents' header values on NATS.

/// Whether a NATS header of this name holds a percent-encoded value: a CloudEvents attribute
/// (`ce-…`, case aside), which the relay encodes, a bridge decodes and `poison retry` encodes again.
pub(crate) fn encoded_header(name: &[u8]) -> bool {
    name.len() >= 3 && name[..3].eq_ignore_ascii_case(b"ce-")
}

/// Writes `value` percent-encoded as CloudEvents' NATS and HTTP bindings say header values
/// must be (NATS binding 3.1.3.2): space, `"`, `%` and every character outside printable ASCII
/// (U+0021–U+007E) as `%XY` of each of its UTF-8 bytes, upper-case; the rest as it is.
pub(crate) fn encode_header_value(value: &str, out: &mut String) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for c in value.chars() {
        if matches!(c, '!'..='~') && c != '"' && c != '%' {
            out.push(c);
            continue;
        }
        let mut bytes = [0; 4];
        for byte in c.encode_utf8(&mut bytes).bytes() {
            out.extend(['%', HEX[(byte >> 4) as usize] as char, HEX[(byte & 15) as usize] as char]);
        }
    }
}

/// `a%20b` → `a b`; a `%` not followed by two hex digits stays as it is; bytes that are not
/// UTF-8 become U+FFFD.
pub(crate) fn decode(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
        match (bytes[i], hex(bytes.get(i + 1)), hex(bytes.get(i + 2))) {
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
            }
            (byte, _, _) => {
                out.push(byte);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

#[cfg(test)]
mod tests {
    #[test]
    fn escapes_are_decoded_and_a_stray_percent_is_kept() {
        assert_eq!(super::decode("p%3Ass%40x"), "p:ss@x");
        assert_eq!(super::decode("Bearer%20abc%3D"), "Bearer abc=");
        assert_eq!(super::decode("%2Fetc%2Fca.pem"), "/etc/ca.pem");
        assert_eq!(super::decode("%+1"), "%+1", "a sign is not a hex digit");
        assert_eq!(super::decode("100%"), "100%");
        assert_eq!(super::decode("%zz%4"), "%zz%4");
    }
}
