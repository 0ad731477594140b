//! The id Kafka gives a topic when it is created (KIP-516): a topic deleted and made again under
//! the same name gets a new one, and its partitions start again at offset 0. librdkafka notices
//! the new id but keeps a consumer's position and the group's committed offsets (its own source
//! says "FIXME: an offset reset must be triggered"), so a member would go on reading the new
//! topic from the old topic's offset and skip what the new topic holds below it. The bridge
//! compares this id with the one it committed its offsets under (`group`).
//!
//! The Rust client does not offer librdkafka's `DescribeTopics`, so it is called here through
//! librdkafka's C API: the one place in the crate that needs `unsafe`.

use std::ffi::{CStr, CString};
use std::time::Duration;

use rdkafka::bindings as sys;
use rdkafka::client::{Client, ClientContext};

/// The id of `topic` in base64 (as Kafka's tools print it), asked of the cluster through
/// `client`; an error names why it could not be read (the topic does not exist, a timeout).
/// Blocking: call it from a blocking task.
pub(crate) fn describe<C: ClientContext>(client: &Client<C>, topic: &str, timeout: Duration) -> Result<String, String> {
    let name = CString::new(topic).map_err(|_| format!("topic {topic:?} has a NUL byte"))?;
    let millis = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
    let rk = client.native_ptr();
    // SAFETY: every pointer below comes from librdkafka, is checked for null before use, and is
    // destroyed exactly once, after the last use of anything it owns (the descriptions belong to
    // the event). `rk` outlives the call: `client` is borrowed for its length.
    unsafe {
        let mut names = [name.as_ptr()];
        let topics = sys::rd_kafka_TopicCollection_of_topic_names(names.as_mut_ptr(), 1);
        let options = sys::rd_kafka_AdminOptions_new(rk, sys::rd_kafka_admin_op_t::RD_KAFKA_ADMIN_OP_DESCRIBETOPICS);
        let queue = sys::rd_kafka_queue_new(rk);
        if !options.is_null() {
            let mut error = [0 as std::ffi::c_char; 256];
            sys::rd_kafka_AdminOptions_set_request_timeout(options, millis, error.as_mut_ptr(), error.len());
        }
        sys::rd_kafka_DescribeTopics(rk, topics, options, queue);
        // Some margin past the request's own timeout, so its answer (a timeout error) is read.
        let event = sys::rd_kafka_queue_poll(queue, millis.saturating_add(1000));
        let found = read_event(event, topic);
        if !event.is_null() {
            sys::rd_kafka_event_destroy(event);
        }
        sys::rd_kafka_queue_destroy(queue);
        if !options.is_null() {
            sys::rd_kafka_AdminOptions_destroy(options);
        }
        sys::rd_kafka_TopicCollection_destroy(topics);
        found
    }
}

/// The topic id in a `DescribeTopics` result event.
///
/// # Safety
/// `event` is null or an event from `rd_kafka_queue_poll`, not yet destroyed.
unsafe fn read_event(event: *mut sys::rd_kafka_event_t, topic: &str) -> Result<String, String> {
    let text = |s: *const std::ffi::c_char| {
        // SAFETY: librdkafka's error strings are NUL-terminated and live as long as their owner.
        if s.is_null() { String::new() } else { unsafe { CStr::from_ptr(s) }.to_string_lossy().into_owned() }
    };
    if event.is_null() {
        return Err(format!("no answer describing topic {topic}"));
    }
    // SAFETY: `event` is a live event (the caller's promise); what it returns lives as long.
    unsafe {
        if sys::rd_kafka_event_error(event) != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(format!("describing topic {topic}: {}", text(sys::rd_kafka_event_error_string(event))));
        }
        let result = sys::rd_kafka_event_DescribeTopics_result(event);
        if result.is_null() {
            return Err(format!("describing topic {topic}: not a topic description"));
        }
        let mut count = 0usize;
        let descriptions = sys::rd_kafka_DescribeTopics_result_topics(result, &mut count);
        if descriptions.is_null() || count == 0 {
            return Err(format!("topic {topic} was not described"));
        }
        let description = *descriptions;
        let error = sys::rd_kafka_TopicDescription_error(description);
        if !error.is_null() && sys::rd_kafka_error_code(error) != sys::rd_kafka_resp_err_t::RD_KAFKA_RESP_ERR_NO_ERROR {
            return Err(format!("topic {topic}: {}", text(sys::rd_kafka_error_string(error))));
        }
        let id = sys::rd_kafka_TopicDescription_topic_id(description);
        // A broker older than Kafka 2.8 gives no id: the all-zero one.
        if id.is_null()
            || (sys::rd_kafka_Uuid_most_significant_bits(id) == 0 && sys::rd_kafka_Uuid_least_significant_bits(id) == 0)
        {
            return Err(format!("topic {topic} has no id (a broker older than Kafka 2.8)"));
        }
        Ok(text(sys::rd_kafka_Uuid_base64str(id)))
    }
}
