//! The append script: one atomic call appends a run of entries to one stream, optionally
//! skipping events already appended within the dedupe window, and stops at the first failure
//! (so a later event of an ordered key never overtakes an earlier one).
//!
//! KEYS: the stream, then one dedupe marker per entry (all hash-tagged to the stream's slot, so
//! the call works on Redis Cluster). ARGV: window ms (0 = no dedupe), stop-on-failure flag,
//! trim kind ("" / MAXLEN / MINID), trim value, entry count, then per entry its field count and
//! fields. Reply: flat pairs of status (ok / dup / err / skip) and entry id or error.

pub(crate) const SOURCE: &str = r#"
local stream = KEYS[1]
local window = tonumber(ARGV[1])
local stop_on_failure = ARGV[2] == '1'
local trim_kind, trim_value = ARGV[3], ARGV[4]
local count = tonumber(ARGV[5])
local pos = 6
local out = {}
local failed = false
for i = 1, count do
  local nfields = tonumber(ARGV[pos])
  pos = pos + 1
  if failed then
    out[#out + 1] = 'skip'; out[#out + 1] = ''
  else
    local marker = KEYS[i + 1]
    local prior = false
    if window > 0 then prior = redis.call('GET', marker) end
    if prior then
      out[#out + 1] = 'dup'; out[#out + 1] = prior
    else
      local args = {stream}
      if trim_kind ~= '' then
        args[#args + 1] = trim_kind; args[#args + 1] = '~'; args[#args + 1] = trim_value
      end
      args[#args + 1] = '*'
      for j = 0, nfields - 1 do args[#args + 1] = ARGV[pos + j] end
      local id = redis.pcall('XADD', unpack(args))
      if type(id) == 'table' and id.err then
        out[#out + 1] = 'err'; out[#out + 1] = id.err
        failed = stop_on_failure
      else
        if window > 0 then redis.call('SET', marker, id, 'PX', window) end
        out[#out + 1] = 'ok'; out[#out + 1] = id
      end
    end
  end
  pos = pos + nfields
end
return out
"#;

/// A stream key dedupe cannot put a marker beside (in the same cluster slot).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("stream key `{0}` has no usable hash tag and contains `}}`; dedupe cannot mark it")]
pub(crate) struct Untaggable(pub String);

/// The key that marks `event_id` as appended to `stream`: `<prefix>{<tag>}:<event_id>`, where
/// `<tag>` is the stream's own hash tag if it has one (Redis hashes only that part), else the
/// whole stream key, so marker and stream always share a cluster slot. A key whose whole text is
/// hashed but holds a `}` cannot be wrapped in a tag; such a stream cannot be deduplicated.
pub(crate) fn marker_key(prefix: &str, stream: &str, event_id: &str) -> Result<String, Untaggable> {
    let tag = hash_tag(stream);
    if tag.contains('}') {
        return Err(Untaggable(stream.to_owned()));
    }
    Ok(format!("{prefix}{{{tag}}}:{event_id}"))
}

/// What Redis Cluster hashes: the text between the first `{` and the next `}` if non-empty,
/// else the whole key.
pub(crate) fn hash_tag(key: &str) -> &str {
    if let Some(open) = key.find('{')
        && let Some(len) = key[open + 1..].find('}')
        && len > 0
    {
        return &key[open + 1..open + 1 + len];
    }
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_share_the_stream_slot() {
        assert_eq!(marker_key("d:", "audit:user", "e1").unwrap(), "d:{audit:user}:e1");
        assert_eq!(marker_key("d:", "audit:{acme}:user", "e1").unwrap(), "d:{acme}:e1");
        // An empty tag does not count: Redis hashes the whole key, which a tag cannot wrap.
        assert!(marker_key("d:", "audit:{}:user", "e1").is_err());
    }

    #[test]
    fn hash_tag_follows_the_cluster_rules() {
        assert_eq!(hash_tag("{user1000}.following"), "user1000");
        assert_eq!(hash_tag("foo{}{bar}"), "foo{}{bar}");
        assert_eq!(hash_tag("foo{{bar}}zap"), "{bar");
        assert_eq!(hash_tag("foo{bar}{zap}"), "bar");
    }
}
