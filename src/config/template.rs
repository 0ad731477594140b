//! Templates over claimed columns, e.g. `audit:{aggregate_type}` for the stream key.
//!
//! `{column}` is replaced by the row's value; `{{` and `}}` are literal braces, which Redis
//! Cluster hash tags need (`audit:{{{tenant}}}` renders `audit:{acme}`).

use std::fmt;

/// A parsed template, not yet tied to a statement's columns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Template {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Column(String),
}

/// A template whose columns were found in the claim result; renders rows by index.
#[derive(Debug, Clone)]
pub struct BoundTemplate {
    parts: Vec<BoundPart>,
}

#[derive(Debug, Clone)]
enum BoundPart {
    Text(String),
    Column { index: usize, name: String },
}

/// A template that cannot be used, and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TemplateError {
    #[error("unclosed `{{{0}` (write {{{{ for a literal brace)")]
    Unclosed(String),
    #[error("`{{{0}}}` is not a column reference (write {{{{ for a literal brace)")]
    NotAColumn(String),
    #[error("unmatched `}}` (write }}}} for a literal brace)")]
    Unmatched,
    #[error("column `{0}` is not returned by the claim statement")]
    NotReturned(String),
}

impl Template {
    pub fn parse(text: &str) -> Result<Self, TemplateError> {
        let mut parts = Vec::new();
        let mut literal = String::new();
        let mut chars = text.chars().peekable();
        while let Some(c) = chars.next() {
            match (c, chars.peek()) {
                ('{', Some('{')) | ('}', Some('}')) => {
                    literal.push(c);
                    chars.next();
                }
                ('{', _) => {
                    let (name, closed) = read_until_close(&mut chars);
                    if !closed {
                        return Err(TemplateError::Unclosed(name));
                    }
                    if !is_column_name(&name) {
                        return Err(TemplateError::NotAColumn(name));
                    }
                    if !literal.is_empty() {
                        parts.push(Part::Text(std::mem::take(&mut literal)));
                    }
                    parts.push(Part::Column(name));
                }
                ('}', _) => return Err(TemplateError::Unmatched),
                _ => literal.push(c),
            }
        }
        if !literal.is_empty() {
            parts.push(Part::Text(literal));
        }
        Ok(Self { parts })
    }

    /// The column, when the template is that one column and nothing else (`"{payload}"`).
    pub fn sole_column(&self) -> Option<&str> {
        match self.parts.as_slice() {
            [Part::Column(name)] => Some(name),
            _ => None,
        }
    }

    /// Resolves column names to positions in `columns`; names the first missing one.
    pub fn bind(&self, columns: &[String]) -> Result<BoundTemplate, TemplateError> {
        let parts = self
            .parts
            .iter()
            .map(|part| match part {
                Part::Text(text) => Ok(BoundPart::Text(text.clone())),
                Part::Column(name) => columns
                    .iter()
                    .position(|c| c == name)
                    .map(|index| BoundPart::Column { index, name: name.clone() })
                    .ok_or_else(|| TemplateError::NotReturned(name.clone())),
            })
            .collect::<Result<_, _>>()?;
        Ok(BoundTemplate { parts })
    }
}

/// A row value the template needs is NULL or empty.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MissingValue(pub String);

impl fmt::Display for MissingValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "column `{}` is null or empty", self.0)
    }
}

impl BoundTemplate {
    pub fn render(&self, row: &[Option<String>]) -> Result<String, MissingValue> {
        let mut out = String::new();
        for part in &self.parts {
            match part {
                BoundPart::Text(text) => out.push_str(text),
                BoundPart::Column { index, name } => match row.get(*index).and_then(Option::as_deref) {
                    Some(value) if !value.is_empty() => out.push_str(value),
                    _ => return Err(MissingValue(name.clone())),
                },
            }
        }
        Ok(out)
    }
}

fn read_until_close(chars: &mut impl Iterator<Item = char>) -> (String, bool) {
    let mut name = String::new();
    for c in chars {
        if c == '}' {
            return (name, true);
        }
        name.push(c);
    }
    (name, false)
}

fn is_column_name(name: &str) -> bool {
    !name.is_empty() && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cols(names: &[&str]) -> Vec<String> {
        names.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn renders_columns_and_literal_braces() {
        let t = Template::parse("audit:{{{tenant}}}:{aggregate_type}").unwrap();
        let bound = t.bind(&cols(&["id", "aggregate_type", "tenant"])).unwrap();
        let row = vec![Some("1".into()), Some("order".into()), Some("acme".into())];
        assert_eq!(bound.render(&row).unwrap(), "audit:{acme}:order");
    }

    #[test]
    fn a_plain_name_is_a_constant() {
        let t = Template::parse("audit").unwrap();
        assert_eq!(t.bind(&[]).unwrap().render(&[]).unwrap(), "audit");
    }

    #[test]
    fn null_or_empty_column_is_reported_by_name() {
        let bound = Template::parse("s:{kind}").unwrap().bind(&cols(&["kind"])).unwrap();
        assert_eq!(bound.render(&[None]).unwrap_err(), MissingValue("kind".into()));
        assert_eq!(bound.render(&[Some(String::new())]).unwrap_err(), MissingValue("kind".into()));
    }

    #[test]
    fn unknown_column_and_bad_braces_are_errors() {
        let t = Template::parse("s:{nope}").unwrap();
        assert!(t.bind(&cols(&["id"])).unwrap_err().to_string().contains("`nope`"));
        assert!(Template::parse("s:{a b}").is_err());
        assert!(Template::parse("s:}").is_err());
        assert!(Template::parse("s:{open").is_err());
    }
}
