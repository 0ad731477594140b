//! Result rows as text, whatever the dialect: what a statement returned, column by column, and
//! pages of rows read as they come.

use std::future::Future;

use crate::store::error::StoreResult;

/// A result row: each column's name and its value as text.
pub(crate) type TextRow = Vec<(String, Option<String>)>;

/// Pages of result rows as they are read; a failed read ends them with its error.
pub(crate) type TextPages = tokio::sync::mpsc::Receiver<StoreResult<Vec<TextRow>>>;

/// Runs `read` in a task of its own, which sends pages on the sender it is given (a send fails
/// once the reader dropped the pages: `read` should then stop); a failed read ends the pages
/// with its error. At most one page waits to be taken.
pub(crate) fn read_pages<F, Fut>(read: F) -> TextPages
where
    F: FnOnce(tokio::sync::mpsc::Sender<StoreResult<Vec<TextRow>>>) -> Fut,
    Fut: Future<Output = StoreResult<()>> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    let failed = tx.clone();
    let read = read(tx);
    tokio::spawn(async move {
        if let Err(error) = read.await {
            let _ = failed.send(Err(error)).await;
        }
    });
    rx
}

/// A named column of a result row, as text.
pub(crate) fn column<'a>(row: &'a TextRow, name: &str) -> Option<&'a str> {
    row.iter().find(|(n, _)| n == name).and_then(|(_, v)| v.as_deref())
}
