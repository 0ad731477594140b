//! Loosely typed values between configured SQL and the relay.
//!
//! Statements are written by operators for their own tables, so the relay cannot know whether an
//! `id` is `bigint`, `text` or `uuid`. Parameters bind to whatever type Postgres inferred for the
//! placeholder ([`Param`]); result columns of the common scalar types are read as text ([`Cell`]).

use std::error::Error;

use bytes::BytesMut;
use tokio_postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};

type BoxError = Box<dyn Error + Sync + Send>;

/// Converted to the placeholder's type when bound.
pub(crate) use crate::store::param::Param;

const SCALARS: &[Type] = &[
    Type::TEXT,
    Type::VARCHAR,
    Type::BPCHAR,
    Type::NAME,
    Type::INT2,
    Type::INT4,
    Type::INT8,
    Type::FLOAT4,
    Type::FLOAT8,
    Type::UUID,
    Type::BOOL,
    Type::JSON,
    Type::JSONB,
];
const ARRAYS: &[Type] = &[
    Type::TEXT_ARRAY,
    Type::VARCHAR_ARRAY,
    Type::BPCHAR_ARRAY,
    Type::INT4_ARRAY,
    Type::INT8_ARRAY,
    Type::UUID_ARRAY,
    Type::JSON_ARRAY,
    Type::JSONB_ARRAY,
];

/// Whether a placeholder of type `ty` can be bound at all.
pub(crate) fn param_type_supported(ty: &Type) -> bool {
    SCALARS.contains(ty) || ARRAYS.contains(ty)
}

/// A value that cannot be sent as its placeholder's type (text that is no number, a number out
/// of range): the data's fault, told apart from every other client-side error by its type.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct BindError(BoxError);

/// A result value that cannot be read as text: the statement's result breaks the contract.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct CellError(BoxError);

/// `values` as tokio-postgres takes a statement's parameters.
pub(crate) fn refs(values: &[Param]) -> Vec<&(dyn ToSql + Sync)> {
    values.iter().map(|v| v as &(dyn ToSql + Sync)).collect()
}

impl ToSql for Param {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        self.to_wire(ty, out).map_err(|e| Box::new(BindError(e)) as BoxError)
    }

    fn accepts(ty: &Type) -> bool {
        param_type_supported(ty)
    }

    to_sql_checked!();
}

impl Param {
    fn to_wire(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        match self {
            Param::Null => Ok(IsNull::Yes),
            Param::Json(s) if matches!(*ty, Type::JSON | Type::JSONB) => json_to_sql(s, ty, out),
            Param::Text(s) if matches!(*ty, Type::JSON | Type::JSONB) => {
                json_to_sql(&serde_json::to_string(s)?, ty, out)
            }
            Param::Json(s) | Param::Text(s) => text_to_sql(s, ty, out),
            Param::Int(i) => int_to_sql(*i, ty, out),
            Param::Texts(v) => texts_to_sql(v, ty, out),
            Param::Column(v) => column_to_sql(v, ty, out),
            Param::JsonColumn(v) => match *ty {
                Type::JSON_ARRAY | Type::JSONB_ARRAY => {
                    v.iter().map(|s| JsonText(s)).collect::<Vec<_>>().to_sql(ty, out)
                }
                _ => texts_to_sql(v, ty, out),
            },
            Param::Ints(v) => match *ty {
                Type::INT8_ARRAY => v.to_sql(ty, out),
                Type::INT4_ARRAY => narrow::<i32>(v)?.to_sql(ty, out),
                _ => texts_to_sql(&v.iter().map(i64::to_string).collect::<Vec<_>>(), ty, out),
            },
        }
    }
}

fn text_to_sql(s: &str, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
    match *ty {
        Type::INT2 => s.parse::<i16>()?.to_sql(ty, out),
        Type::INT4 => s.parse::<i32>()?.to_sql(ty, out),
        Type::INT8 => s.parse::<i64>()?.to_sql(ty, out),
        Type::FLOAT4 => s.parse::<f32>()?.to_sql(ty, out),
        Type::FLOAT8 => s.parse::<f64>()?.to_sql(ty, out),
        Type::UUID => Uuid::parse(s)?.to_sql(ty, out),
        Type::BOOL => s.parse::<bool>()?.to_sql(ty, out),
        _ => s.to_sql(ty, out),
    }
}

/// JSON text as json, or as jsonb (a version byte, then the text); the server validates it.
fn json_to_sql(json: &str, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
    if *ty == Type::JSONB {
        out.extend_from_slice(&[1]);
    }
    out.extend_from_slice(json.as_bytes());
    Ok(IsNull::No)
}

fn int_to_sql(i: i64, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
    match *ty {
        Type::INT2 => i16::try_from(i)?.to_sql(ty, out),
        Type::INT4 => i32::try_from(i)?.to_sql(ty, out),
        Type::INT8 => i.to_sql(ty, out),
        Type::FLOAT4 => (i as f32).to_sql(ty, out),
        Type::FLOAT8 => (i as f64).to_sql(ty, out),
        _ => text_to_sql(&i.to_string(), ty, out),
    }
}

fn texts_to_sql(v: &[String], ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
    match *ty {
        Type::JSON_ARRAY | Type::JSONB_ARRAY => v.iter().map(|s| JsonText(s)).collect::<Vec<_>>().to_sql(ty, out),
        Type::INT8_ARRAY => parse_all::<i64>(v)?.to_sql(ty, out),
        Type::INT4_ARRAY => parse_all::<i32>(v)?.to_sql(ty, out),
        Type::UUID_ARRAY => v.iter().map(|s| Uuid::parse(s)).collect::<Result<Vec<_>, _>>()?.to_sql(ty, out),
        _ => v.to_sql(ty, out),
    }
}

/// An array that may hold NULLs, each element converted as a scalar of the array's element type.
fn column_to_sql(v: &[Option<String>], ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
    let params: Vec<Param> = v.iter().map(|s| s.clone().map_or(Param::Null, Param::Text)).collect();
    params.to_sql(ty, out)
}

/// JSON text as an element of a json[] / jsonb[] array.
#[derive(Debug)]
struct JsonText<'a>(&'a str);

impl ToSql for JsonText<'_> {
    fn to_sql(&self, ty: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        json_to_sql(self.0, ty, out)
    }

    fn accepts(ty: &Type) -> bool {
        matches!(*ty, Type::JSON | Type::JSONB)
    }

    to_sql_checked!();
}

fn parse_all<T: std::str::FromStr>(v: &[String]) -> Result<Vec<T>, BoxError>
where
    T::Err: Error + Sync + Send + 'static,
{
    v.iter().map(|s| s.parse::<T>().map_err(Into::into)).collect()
}

fn narrow<T: TryFrom<i64>>(v: &[i64]) -> Result<Vec<T>, BoxError>
where
    T::Error: Error + Sync + Send + 'static,
{
    v.iter().map(|i| T::try_from(*i).map_err(Into::into)).collect()
}

/// A result column read as text, whatever its scalar type. NULL reads as `None` via `Option<Cell>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Cell(pub String);

impl<'a> FromSql<'a> for Cell {
    fn from_sql(ty: &Type, raw: &'a [u8]) -> Result<Self, BoxError> {
        Self::read(ty, raw).map_err(|e| Box::new(CellError(e)) as BoxError)
    }

    fn accepts(ty: &Type) -> bool {
        column_type_supported(ty)
    }
}

impl Cell {
    fn read(ty: &Type, raw: &[u8]) -> Result<Self, BoxError> {
        let text = match *ty {
            Type::INT2 => itoa::Buffer::new().format(i16::from_sql(ty, raw)?).to_owned(),
            Type::INT4 => itoa::Buffer::new().format(i32::from_sql(ty, raw)?).to_owned(),
            Type::INT8 => itoa::Buffer::new().format(i64::from_sql(ty, raw)?).to_owned(),
            Type::FLOAT4 => f32::from_sql(ty, raw)?.to_string(),
            Type::FLOAT8 => f64::from_sql(ty, raw)?.to_string(),
            Type::BOOL => bool::from_sql(ty, raw)?.to_string(),
            Type::UUID => Uuid(raw.try_into()?).to_string(),
            // jsonb's binary form is a version byte (1) followed by the JSON text.
            Type::JSONB => std::str::from_utf8(raw.get(1..).unwrap_or_default())?.to_owned(),
            _ => std::str::from_utf8(raw)?.to_owned(),
        };
        Ok(Cell(text))
    }
}

/// Whether a result column of type `ty` can be read.
pub(crate) fn column_type_supported(ty: &Type) -> bool {
    SCALARS.contains(ty)
}

/// What a prepared statement's types make impossible, each naming `context`: a parameter
/// (named in `names`, in placeholder order) that cannot be bound, and, with `columns`, a result
/// column that cannot be read as text.
pub(crate) fn type_problems(
    context: &str,
    names: &[String],
    stmt: &tokio_postgres::Statement,
    columns: bool,
) -> Vec<String> {
    let mut problems = Vec::new();
    for (name, ty) in names.iter().zip(stmt.params()) {
        if !param_type_supported(ty) {
            problems.push(format!(
                "{context}: parameter :{name} has type {ty}, which cannot be bound; cast it, e.g. :{name}::text"
            ));
        }
    }
    for column in stmt.columns().iter().filter(|_| columns) {
        if !column_type_supported(column.type_()) {
            problems.push(format!(
                "{context}: result column `{}` has type {}; cast it to text",
                column.name(),
                column.type_()
            ));
        }
    }
    problems
}

/// A UUID carried as its 16 bytes, written and read in the canonical hyphenated form.
#[derive(Debug, Clone, Copy)]
struct Uuid([u8; 16]);

impl Uuid {
    fn parse(s: &str) -> Result<Self, BoxError> {
        let hex: Vec<u8> = s.bytes().filter(|b| *b != b'-').collect();
        if hex.len() != 32 {
            return Err(format!("`{s}` is not a UUID").into());
        }
        let mut bytes = [0u8; 16];
        for (i, pair) in hex.chunks(2).enumerate() {
            bytes[i] = u8::from_str_radix(std::str::from_utf8(pair)?, 16)?;
        }
        Ok(Uuid(bytes))
    }
}

impl std::fmt::Display for Uuid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, b) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                f.write_str("-")?;
            }
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl ToSql for Uuid {
    fn to_sql(&self, _: &Type, out: &mut BytesMut) -> Result<IsNull, BoxError> {
        out.extend_from_slice(&self.0);
        Ok(IsNull::No)
    }

    fn accepts(ty: &Type) -> bool {
        *ty == Type::UUID
    }

    to_sql_checked!();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uuid_round_trips_through_its_text_form() {
        let text = "0190f3a4-5b6c-7d8e-9fa0-b1c2d3e4f506";
        assert_eq!(Uuid::parse(text).unwrap().to_string(), text);
        assert!(Uuid::parse("not-a-uuid").is_err());
    }

    #[test]
    fn text_binds_to_numeric_placeholders() {
        let mut out = BytesMut::new();
        Param::Text("42".into()).to_sql(&Type::INT8, &mut out).unwrap();
        assert_eq!(&out[..], &42i64.to_be_bytes());
        assert!(Param::Text("x".into()).to_sql(&Type::INT8, &mut BytesMut::new()).is_err());
    }

    #[test]
    fn jsonb_cells_drop_the_version_byte() {
        let cell = Cell::from_sql(&Type::JSONB, b"\x01{\"a\":1}").unwrap();
        assert_eq!(cell.0, "{\"a\":1}");
    }
}
