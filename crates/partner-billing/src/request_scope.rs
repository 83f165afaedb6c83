//! The id of the request a task is serving, for its log lines: set once around the request's
//! future, read by the log formatters, and carried by hand into a task that works for the
//! request (a license group writes "license issued" in the scope of a request that went away
//! before its answer).
//!
//! A task-local rather than a `tracing` span: entering and leaving a span on every poll of a
//! request (a lock in the filter, a reference count in the registry) cost about a tenth of a
//! short read (docs/performance.md); a task-local is a swap of one pointer.

use std::future::Future;
use std::sync::Arc;

tokio::task_local! {
    static REQUEST_ID: Arc<str>;
}

/// Runs `future` as the request `id`: every line it logs carries the id. Not an `async fn`:
/// that would move the request's whole future once more.
pub fn serve<F: Future>(id: Arc<str>, future: F) -> impl Future<Output = F::Output> {
    REQUEST_ID.scope(id, future)
}

/// The id of the request this task is serving: for a log line, or to carry into a task that
/// works for the request.
pub fn current() -> Option<Arc<str>> {
    REQUEST_ID.try_with(Arc::clone).ok()
}

/// Runs `f` as the request `id` (none: as no request), from a task of another.
pub fn within<R>(id: Option<Arc<str>>, f: impl FnOnce() -> R) -> R {
    match id {
        Some(id) => REQUEST_ID.sync_scope(id, f),
        None => f(),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::{current, serve, within};

    #[tokio::test]
    async fn the_id_is_seen_inside_the_request_only() {
        assert_eq!(current(), None);
        let inside = serve(Arc::from("req-1"), async {
            tokio::task::yield_now().await;
            current()
        })
        .await;
        assert_eq!(inside.as_deref(), Some("req-1"));
        assert_eq!(current(), None);
    }

    #[tokio::test]
    async fn another_task_writes_in_the_scope_it_was_handed() {
        let carried = serve(Arc::from("req-2"), async { current() }).await;
        let seen = tokio::spawn(async move {
            let before = current();
            let during = within(carried, current);
            (before, during)
        })
        .await
        .unwrap();
        assert_eq!(seen.0, None);
        assert_eq!(seen.1.as_deref(), Some("req-2"));
        assert_eq!(within(None, current), None);
    }
}
