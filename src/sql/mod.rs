//! SQL text handling shared by the dialects.

pub mod params;
