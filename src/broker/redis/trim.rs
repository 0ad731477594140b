//! Consumer-aware trimming: the safe point of a stream is the oldest entry any group still
//! needs — its lowest pending entry, or the first entry after what it was last delivered.

use fred::prelude::*;
use fred::types::{ClusterHash, CustomCommand, Value};

use super::client::RedisStream;
use crate::broker::read::text;
use crate::broker::seam::{EntryId, Unavailable};

/// What one group still needs, from XINFO GROUPS and XPENDING.
pub(crate) fn group_floor(last_delivered: EntryId, lowest_pending: Option<EntryId>) -> EntryId {
    lowest_pending.unwrap_or(last_delivered.next()).min(last_delivered.next())
}

impl RedisStream {
    pub(super) async fn trim_below_acknowledged(&self, stream: &str) -> Result<u64, Unavailable> {
        let fail = |e: Error| Unavailable(e.details().to_owned());
        // No group has read anything yet: nobody vouches for any entry.
        let Some(floor) = self.floor(stream).await.map_err(fail)? else { return Ok(0) };
        let xtrim = CustomCommand::new_static("XTRIM", ClusterHash::FirstKey, false);
        let removed: Value = self
            .client
            .custom(xtrim, vec![stream.to_owned(), "MINID".into(), "~".into(), floor.to_string()])
            .await
            .map_err(fail)?;
        Ok(removed.as_u64().unwrap_or(0))
    }

    /// The oldest entry any group of `stream` still needs; `None` when it has no groups (or
    /// does not exist).
    pub(super) async fn floor(&self, stream: &str) -> Result<Option<EntryId>, Error> {
        let xinfo = CustomCommand::new_static("XINFO", ClusterHash::Offset(1), false);
        let groups: Value = match self.client.custom(xinfo, vec!["GROUPS", stream]).await {
            Ok(groups) => groups,
            Err(e) if e.details().contains("no such key") => return Ok(None),
            Err(e) => return Err(e),
        };
        let Value::Array(groups) = groups else { return Ok(None) };
        let mut floor: Option<EntryId> = None;
        for group in groups {
            let fields = pairs(group);
            let get = |name: &str| fields.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
            let (Some(name), Some(last)) = (get("name").and_then(text), get("last-delivered-id").and_then(text)) else {
                continue;
            };
            let Some(last) = EntryId::parse(&last) else { continue };
            let pending = get("pending").and_then(|v| v.as_u64()).unwrap_or(0);
            let lowest = if pending > 0 { self.lowest_pending(stream, &name).await? } else { None };
            let group_floor = group_floor(last, lowest);
            floor = Some(floor.map_or(group_floor, |f| f.min(group_floor)));
        }
        Ok(floor)
    }

    async fn lowest_pending(&self, stream: &str, group: &str) -> Result<Option<EntryId>, Error> {
        let xpending = CustomCommand::new_static("XPENDING", ClusterHash::FirstKey, false);
        let summary: Value = self.client.custom(xpending, vec![stream, group]).await?;
        let Value::Array(parts) = summary else { return Ok(None) };
        Ok(parts.get(1).cloned().and_then(text).and_then(|id| EntryId::parse(&id)))
    }
}

pub(super) fn pairs(value: Value) -> Vec<(String, Value)> {
    match value {
        Value::Array(flat) => flat.chunks(2).filter_map(|p| Some((text(p[0].clone())?, p.get(1)?.clone()))).collect(),
        Value::Map(map) => map.inner().into_iter().filter_map(|(k, v)| Some((k.as_str()?.to_string(), v))).collect(),
        _ => Vec::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_needs_its_lowest_pending_entry_or_what_follows_its_last_delivery() {
        let last = EntryId(100, 5);
        assert_eq!(group_floor(last, None), EntryId(100, 6));
        assert_eq!(group_floor(last, Some(EntryId(90, 0))), EntryId(90, 0));
        assert_eq!(group_floor(EntryId(0, 0), None), EntryId(0, 1), "a group that read nothing keeps everything");
    }

    #[test]
    fn ids_parse_and_order_like_redis() {
        assert!(EntryId::parse("10-2").unwrap() < EntryId::parse("10-10").unwrap());
        assert_eq!(EntryId::parse("7").unwrap(), EntryId(7, 0));
        assert_eq!(EntryId(5, u64::MAX).next(), EntryId(6, 0));
    }
}
