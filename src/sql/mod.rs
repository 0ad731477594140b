//! SQL text handling shared by the dialects.

pub(crate) mod params;
