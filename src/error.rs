//! Error text for logs and records, shared by every component.

/// An error and its sources on one line (`a: b: c`), for logs.
pub(crate) fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut source = error.source();
    while let Some(e) = source {
        text.push_str(": ");
        text.push_str(&e.to_string());
        source = e.source();
    }
    text
}

/// Error text as it may be stored in a row (`last_error`, a poison record's detail): at most
/// `max_chars` characters, and nothing a database refuses in text. A NUL byte (Postgres text
/// cannot hold one: an HTTP error body with one made the failure's own write fail) becomes
/// `\0`, other control characters but newline and tab become `\u{…}`; the text stays readable
/// and the write cannot fail because of what an endpoint or a database answered.
pub(crate) fn storable(text: &str, max_chars: usize) -> String {
    let mut kept = String::with_capacity(text.len().min(max_chars.saturating_mul(4)));
    for (n, c) in text.chars().enumerate() {
        if n == max_chars {
            kept.push('…');
            break;
        }
        match c {
            '\0' => kept.push_str("\\0"),
            '\n' | '\t' => kept.push(c),
            c if c.is_control() => kept.push_str(&c.escape_unicode().to_string()),
            c => kept.push(c),
        }
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stored_error_text_is_bounded_and_holds_no_nul_or_control_characters() {
        assert_eq!(
            storable("HTTP 500: bad\0body\u{1b}[31m\nnext\tcol", 100),
            "HTTP 500: bad\\0body\\u{1b}[31m\nnext\tcol"
        );
        assert_eq!(storable("ééééé", 3), "ééé…");
        assert_eq!(storable("short", 5), "short");
        let long = "x".repeat(10_000);
        assert_eq!(storable(&long, 2000).chars().count(), 2001);
    }
}
