//! A batch's delivery reports, gathered in one place. Each message carries its place in its
//! batch as librdkafka's opaque; the producer's polling thread writes each report there and wakes
//! the relay once, when the batch's last report is in: one wake-up per batch, not a channel, a
//! future and a wake-up per message as with rdkafka's `FutureProducer` (a fifth of the relay's
//! CPU per event, measured when this replaced it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rdkafka::error::KafkaError;
use rdkafka::message::Message as _;
use rdkafka::producer::{DeliveryResult, ProducerContext};
use tokio::sync::Notify;

use super::client::Logged;

/// Where a message was stored (partition, offset), or why it was not.
pub(super) type Report = Result<(i32, i64), KafkaError>;

/// The reports of one batch of messages, by their place in it.
pub(super) struct Batch {
    reports: Mutex<Vec<Option<Report>>>,
    /// The places not yet settled.
    left: AtomicUsize,
    /// Told once, when `left` reaches 0.
    done: Notify,
}

/// A message's place in its batch: the opaque librdkafka hands back with its report.
pub(crate) struct Place {
    batch: Arc<Batch>,
    index: usize,
}

impl Batch {
    /// A batch of `size` places, each to be settled once: by its report, or by the caller for a
    /// message that was never handed over.
    pub(super) fn new(size: usize) -> Arc<Self> {
        let reports = Mutex::new((0..size).map(|_| None).collect());
        Arc::new(Self { reports, left: AtomicUsize::new(size), done: Notify::new() })
    }

    /// The opaque for the message at `index`.
    pub(super) fn place(self: &Arc<Self>, index: usize) -> Box<Place> {
        Box::new(Place { batch: self.clone(), index })
    }

    /// Records `report` for `index` (`None`: nothing to record, the caller has its outcome).
    pub(super) fn settle(&self, index: usize, report: Option<Report>) {
        if let Some(report) = report
            && let Some(place) = self.reports.lock().unwrap_or_else(PoisonError::into_inner).get_mut(index)
        {
            // (Gone when the report came after the relay stopped waiting: nothing to record.)
            *place = Some(report);
        }
        if self.left.fetch_sub(1, Ordering::AcqRel) == 1 {
            // A stored permit if the relay is not waiting yet: it sees it when it does.
            self.done.notify_one();
        }
    }

    /// Every place's report once all are settled, or what came within `limit` (librdkafka
    /// reports every message by its delivery timeout; the limit, longer, only bounds a wait
    /// that would otherwise trust that for ever).
    pub(super) async fn reports(&self, limit: Duration) -> Vec<Option<Report>> {
        let all_in = async {
            while self.left.load(Ordering::Acquire) != 0 {
                self.done.notified().await;
            }
        };
        let _ = tokio::time::timeout(limit, all_in).await;
        std::mem::take(&mut *self.reports.lock().unwrap_or_else(PoisonError::into_inner))
    }
}

/// The relay's producer's context is [`Logged`] (its log lines as every Kafka client of
/// handoff says them), which also writes each delivery report to its message's place.
impl ProducerContext for Logged {
    type DeliveryOpaque = Box<Place>;

    fn delivery(&self, result: &DeliveryResult<'_>, place: Box<Place>) {
        let report = match result {
            Ok(message) => Ok((message.partition(), message.offset())),
            Err((error, _)) => Err(error.clone()),
        };
        place.batch.settle(place.index, Some(report));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_batch_is_done_when_every_place_is_settled_in_any_order_on_any_thread() {
        let batch = Batch::new(3);
        let last = batch.place(2);
        let other = std::thread::spawn(move || last.batch.settle(last.index, Some(Err(KafkaError::Canceled))));
        batch.settle(1, None);
        batch.place(0).batch.settle(0, Some(Ok((0, 7))));
        let reports = batch.reports(Duration::from_secs(3600)).await;
        other.join().unwrap();
        assert!(matches!(reports[0], Some(Ok((0, 7)))));
        assert!(reports[1].is_none());
        assert!(matches!(reports[2], Some(Err(KafkaError::Canceled))));
    }

    #[tokio::test]
    async fn a_report_after_the_wait_ended_is_dropped() {
        let batch = Batch::new(2);
        batch.settle(0, Some(Ok((1, 1))));
        let reports = batch.reports(Duration::ZERO).await;
        assert!(matches!(reports[..], [Some(Ok((1, 1))), None]));
        batch.settle(1, Some(Ok((1, 2))));
    }
}
