//! A bridge's sharded streams: `{ key = "audit:order:{shard}", shard_count = 16, shards = "0-7" }`
//! reads the streams `audit:order:0` … `audit:order:7`, the shards a relay's
//! `{shard(column, 16)}` template writes. The entry is expanded here, once, into one stream
//! per shard; everything after the loader sees plain stream keys.

use crate::bridge::config::StreamSource;

/// The placeholder a sharded stream key carries.
pub(super) const PLACEHOLDER: &str = "{shard}";

/// Expands every bridge's sharded stream entries; names what is wrong with one.
pub(super) fn expand(bridges: &mut [crate::bridge::config::BridgeConfig], errors: &mut Vec<String>) {
    for bridge in bridges {
        let mut expanded = Vec::with_capacity(bridge.streams.len());
        for (j, source) in std::mem::take(&mut bridge.streams).into_iter().enumerate() {
            let path = format!("bridge `{}`.streams[{j}]", bridge.name);
            match expand_one(source) {
                Ok(sources) => expanded.extend(sources),
                Err(e) => errors.push(format!("{path}: {e}")),
            }
        }
        bridge.streams = expanded;
    }
}

/// What is wrong with a sharded stream entry.
#[derive(Debug, thiserror::Error)]
pub(super) enum ShardsError {
    #[error("shards needs shard_count (how many shards the relay's template spreads keys over)")]
    NoCount,
    #[error("shard_count must be between 1 and {}", crate::template::MAX_SHARDS)]
    Count,
    #[error("with shard_count, the key must carry {PLACEHOLDER} once, where the shard number goes")]
    Placeholder,
    #[error("shards: `{0}` is not a shard number or a range like 0-7")]
    NotASet(String),
    #[error("shards: `{piece}` is not within 0-{} (shard_count = {count})", count - 1)]
    OutOfRange { piece: String, count: u32 },
}

fn expand_one(source: StreamSource) -> Result<Vec<StreamSource>, ShardsError> {
    let placeholders = source.key.matches(PLACEHOLDER).count();
    let Some(count) = source.shard_count else {
        if source.shards.is_some() {
            return Err(ShardsError::NoCount);
        }
        return Ok(vec![source]);
    };
    if !(1..=crate::template::MAX_SHARDS).contains(&count) {
        return Err(ShardsError::Count);
    }
    if placeholders != 1 {
        return Err(ShardsError::Placeholder);
    }
    let taken = parse_set(source.shards.as_deref().unwrap_or("all"), count)?;
    Ok(taken
        .into_iter()
        .map(|shard| StreamSource {
            key: source.key.replacen(PLACEHOLDER, itoa::Buffer::new().format(shard), 1),
            owner: source.owner.clone(),
            shard_count: None,
            shards: None,
        })
        .collect())
}

/// `"all"`, or ranges and numbers separated by commas (`"0-7"`, `"0,4,8-11"`), each below `count`.
pub(super) fn parse_set(text: &str, count: u32) -> Result<Vec<u32>, ShardsError> {
    if text.trim() == "all" {
        return Ok((0..count).collect());
    }
    let mut taken = Vec::new();
    for piece in text.split(',').map(str::trim) {
        let number = |s: &str| s.trim().parse::<u32>().map_err(|_| ShardsError::NotASet(piece.to_owned()));
        let (low, high) = match piece.split_once('-') {
            Some((low, high)) => (number(low)?, number(high)?),
            None => (number(piece)?, number(piece)?),
        };
        if low > high || high >= count {
            return Err(ShardsError::OutOfRange { piece: piece.to_owned(), count });
        }
        taken.extend(low..=high);
    }
    taken.sort_unstable();
    taken.dedup();
    Ok(taken)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sets_read_ranges_lists_and_all() {
        assert_eq!(parse_set("all", 3).unwrap(), [0, 1, 2]);
        assert_eq!(parse_set("0-2, 5,4", 8).unwrap(), [0, 1, 2, 4, 5]);
        assert!(parse_set("6-8", 8).unwrap_err().to_string().contains("within 0-7"));
        assert!(parse_set("3-1", 8).is_err());
        assert!(parse_set("x", 8).unwrap_err().to_string().contains("`x`"));
    }

    #[test]
    fn a_sharded_entry_becomes_one_stream_per_shard_in_the_set() {
        let source = |key: &str, count, shards: Option<&str>| StreamSource {
            key: key.into(),
            owner: Some("orders".into()),
            shard_count: count,
            shards: shards.map(Into::into),
        };
        let keys = |r: Vec<StreamSource>| r.into_iter().map(|s| s.key).collect::<Vec<_>>();
        assert_eq!(keys(expand_one(source("a:{shard}", Some(4), Some("1-2"))).unwrap()), ["a:1", "a:2"]);
        assert_eq!(keys(expand_one(source("a:{{shard}}", Some(2), None)).unwrap()), ["a:{0}", "a:{1}"]);
        assert_eq!(keys(expand_one(source("plain", None, None)).unwrap()), ["plain"]);
        assert!(expand_one(source("a", Some(4), None)).unwrap_err().to_string().contains("{shard} once"));
        assert!(expand_one(source("a:{shard}", None, Some("0"))).unwrap_err().to_string().contains("shard_count"));
    }
}
