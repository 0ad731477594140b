//! Named parameters (`:name`) in configured SQL, rewritten to a dialect's placeholders.
//!
//! Operators write statements with names so that an override reads like the default and a
//! statement may use any subset of the parameters its step offers, in any order. The scanner
//! skips string literals, quoted identifiers, dollar-quoted bodies, comments and `::` casts,
//! so `:id::bigint` binds `id` and `'a:b'` binds nothing.

/// A statement after rewriting: SQL with positional placeholders, and the name behind each.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NamedSql {
    /// SQL text with `$1, $2, …` (Postgres) or `?` (MySQL) placeholders.
    pub sql: String,
    /// Parameter name for each placeholder, in placeholder order.
    pub names: Vec<String>,
}

/// Placeholder style of a dialect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Placeholder {
    /// `$n`, one number per distinct name (reused when a name repeats).
    Numbered,
    /// `?`, one per occurrence (a repeated name is bound twice).
    Positional,
}

/// A statement that cannot be scanned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParseError {
    #[error("positional parameter at byte {0}: use named parameters such as :id")]
    Positional(usize),
    #[error("unterminated {what} starting at byte {at}")]
    Unterminated { what: &'static str, at: usize },
}

/// A configured statement that names a parameter its step does not offer, or does not scan.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum ParamError {
    #[error(transparent)]
    Parse(#[from] ParseError),
    #[error("unknown parameter :{name} (this statement is offered: {offered})")]
    Unknown { name: String, offered: String },
}

/// Rewrites `:name` parameters of `sql` to positional placeholders.
pub fn rewrite(sql: &str, style: Placeholder) -> Result<NamedSql, ParseError> {
    let bytes = sql.as_bytes();
    let mut out = String::with_capacity(sql.len());
    let mut names: Vec<String> = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let skip = skip_quoted(sql, i, style)?;
        if skip > i {
            out.push_str(&sql[i..skip]);
            i = skip;
            continue;
        }
        let c = bytes[i];
        if c == b':' && bytes.get(i + 1) == Some(&b':') {
            out.push_str("::");
            i += 2;
            continue;
        }
        if c == b':' && bytes.get(i + 1).is_some_and(|b| is_name_start(*b)) {
            let end = name_end(bytes, i + 1);
            let name = &sql[i + 1..end];
            out.push_str(&placeholder(&mut names, name, style));
            i = end;
            continue;
        }
        if c == b'$' && style == Placeholder::Numbered && bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
            return Err(ParseError::Positional(i));
        }
        let ch_len = utf8_len(c);
        out.push_str(&sql[i..i + ch_len]);
        i += ch_len;
    }
    Ok(NamedSql { sql: out, names })
}

/// Splits a script at `;` outside quotes and comments; empty statements are dropped. MySQL's
/// claim is such a script (it has no `UPDATE … RETURNING`).
pub(crate) fn split_statements(sql: &str, style: Placeholder) -> Result<Vec<String>, ParseError> {
    let mut statements = Vec::new();
    let mut start = 0;
    let mut i = 0;
    while i < sql.len() {
        let skip = skip_quoted(sql, i, style)?;
        if skip > i {
            i = skip;
            continue;
        }
        if sql.as_bytes()[i] == b';' {
            statements.push(sql[start..i].trim().to_owned());
            start = i + 1;
        }
        i += utf8_len(sql.as_bytes()[i]);
    }
    statements.push(sql[start..].trim().to_owned());
    statements.retain(|s| !s.is_empty());
    Ok(statements)
}

fn placeholder(names: &mut Vec<String>, name: &str, style: Placeholder) -> String {
    match style {
        Placeholder::Numbered => {
            let index = match names.iter().position(|n| n == name) {
                Some(index) => index,
                None => {
                    names.push(name.to_owned());
                    names.len() - 1
                }
            };
            format!("${}", index + 1)
        }
        Placeholder::Positional => {
            names.push(name.to_owned());
            "?".to_owned()
        }
    }
}

/// Returns the index just past a quoted section or comment starting at `i`, or `i` if none starts there.
/// Backticks and `#` comments are MySQL's; dollar quotes are Postgres' (where `#` is an operator).
fn skip_quoted(sql: &str, i: usize, style: Placeholder) -> Result<usize, ParseError> {
    let mysql = style == Placeholder::Positional;
    let bytes = sql.as_bytes();
    let rest = &sql[i..];
    let unterminated = |what: &'static str| ParseError::Unterminated { what, at: i };
    match bytes[i] {
        quote @ (b'\'' | b'"') => skip_literal(bytes, i, quote, mysql).ok_or_else(|| unterminated("quoted text")),
        b'`' if mysql => skip_literal(bytes, i, b'`', mysql).ok_or_else(|| unterminated("quoted identifier")),
        b'-' if rest.starts_with("--") => Ok(rest.find('\n').map_or(sql.len(), |n| i + n + 1)),
        b'#' if mysql => Ok(rest.find('\n').map_or(sql.len(), |n| i + n + 1)),
        b'/' if rest.starts_with("/*") => {
            rest[2..].find("*/").map(|n| i + 2 + n + 2).ok_or_else(|| unterminated("comment"))
        }
        b'$' if !mysql => Ok(skip_dollar_quote(sql, i)),
        _ => Ok(i),
    }
}

/// Index just past the literal opened by `quote` at `i`: a doubled quote escapes, and in MySQL a
/// backslash does too (Postgres' standard-conforming strings take backslashes literally).
fn skip_literal(bytes: &[u8], i: usize, quote: u8, mysql: bool) -> Option<usize> {
    let mut j = i + 1;
    loop {
        match bytes.get(j) {
            None => return None,
            Some(b'\\') if mysql => j += 2,
            Some(&b) if b == quote && bytes.get(j + 1) == Some(&quote) => j += 2,
            Some(&b) if b == quote => return Some(j + 1),
            Some(_) => j += 1,
        }
    }
}

/// Skips a Postgres dollar-quoted body (`$tag$ … $tag$`); returns `i` if `$` does not open one.
fn skip_dollar_quote(sql: &str, i: usize) -> usize {
    let bytes = sql.as_bytes();
    let tag_end = name_end(bytes, i + 1);
    if bytes.get(tag_end) != Some(&b'$') || bytes.get(i + 1).is_some_and(u8::is_ascii_digit) {
        return i;
    }
    let tag = &sql[i..=tag_end];
    match sql[tag_end + 1..].find(tag) {
        Some(n) => tag_end + 1 + n + tag.len(),
        None => i,
    }
}

fn is_name_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_'
}

/// End of a parameter name: letters, digits, `_`, and `.` between name parts
/// (`:payload.actor.id`).
fn name_end(bytes: &[u8], mut i: usize) -> usize {
    loop {
        match bytes.get(i) {
            Some(b) if b.is_ascii_alphanumeric() || *b == b'_' => i += 1,
            Some(b'.') if bytes.get(i + 1).is_some_and(|b| is_name_start(*b)) => i += 1,
            _ => return i,
        }
    }
}

fn utf8_len(first: u8) -> usize {
    match first {
        0x00..=0x7f => 1,
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        _ => 4,
    }
}

/// Checks that `sql` scans and uses only the parameters `offered` (and `<root>.<name>` for a
/// root in `dotted`); the error names the unknown one and lists the offered ones.
pub(crate) fn check_offered(
    sql: &str,
    style: Placeholder,
    offered: &[&str],
    dotted: &[&str],
) -> Result<(), ParamError> {
    let named = rewrite(sql, style)?;
    let known = |n: &str| offered.contains(&n) || n.split_once('.').is_some_and(|(root, _)| dotted.contains(&root));
    match named.names.iter().find(|n| !known(n)) {
        Some(unknown) => Err(ParamError::Unknown {
            name: unknown.clone(),
            offered: offered
                .iter()
                .map(|p| format!(":{p}"))
                .chain(dotted.iter().map(|d| format!(":{d}.<name>")))
                .collect::<Vec<_>>()
                .join(", "),
        }),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn numbered(sql: &str) -> NamedSql {
        rewrite(sql, Placeholder::Numbered).unwrap()
    }

    #[test]
    fn numbers_distinct_names_and_reuses_repeats() {
        let r = numbered("update t set a = :x where id = :id and b = :x");
        assert_eq!(r.sql, "update t set a = $1 where id = $2 and b = $1");
        assert_eq!(r.names, ["x", "id"]);
    }

    #[test]
    fn positional_binds_every_occurrence() {
        let r = rewrite("select :a, :b, :a", Placeholder::Positional).unwrap();
        assert_eq!(r.sql, "select ?, ?, ?");
        assert_eq!(r.names, ["a", "b", "a"]);
    }

    #[test]
    fn casts_are_not_parameters() {
        let r = numbered("select :id::bigint, x::text, :ids::text[]");
        assert_eq!(r.sql, "select $1::bigint, x::text, $2::text[]");
        assert_eq!(r.names, ["id", "ids"]);
    }

    #[test]
    fn dotted_names_reach_into_the_payload() {
        let r = numbered("insert into t values (:payload.actor.id, :payload.n::int, :event_id)");
        assert_eq!(r.names, ["payload.actor.id", "payload.n", "event_id"]);
        assert_eq!(r.sql, "insert into t values ($1, $2::int, $3)");
    }

    #[test]
    fn quotes_and_comments_are_left_alone() {
        let sql = "select ':no', \":no\", $q$ :no $q$ -- :no\n, :yes /* :no */";
        let r = numbered(sql);
        assert_eq!(r.names, ["yes"]);
        assert!(r.sql.contains("':no'") && r.sql.contains("$q$ :no $q$"));
        let mysql = rewrite("select `:no`, 'a\\':no', :yes # :no\n", Placeholder::Positional).unwrap();
        assert_eq!(mysql.names, ["yes"]);
    }

    #[test]
    fn doubled_quotes_stay_inside_the_literal() {
        assert_eq!(numbered("select 'it''s :no', :yes").names, ["yes"]);
    }

    #[test]
    fn non_ascii_text_survives() {
        assert_eq!(numbered("select '审计', :a -- 注释").sql, "select '审计', $1 -- 注释");
    }

    #[test]
    fn scripts_split_at_semicolons_outside_quotes() {
        let parts =
            split_statements("select ';'; update t set a = 1 -- ;\n; ;select 2", Placeholder::Positional).unwrap();
        assert_eq!(parts, ["select ';'", "update t set a = 1 -- ;", "select 2"]);
    }

    #[test]
    fn unterminated_literal_is_an_error() {
        let err = rewrite("select 'oops", Placeholder::Numbered).unwrap_err();
        assert!(err.to_string().contains("unterminated quoted text"), "{err}");
    }

    #[test]
    fn positional_dollar_parameters_are_rejected() {
        let err = rewrite("select $1", Placeholder::Numbered).unwrap_err();
        assert!(err.to_string().contains("named parameters"), "{err}");
    }
}
