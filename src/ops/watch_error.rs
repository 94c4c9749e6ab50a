//! What a watcher error says about the API server: the status code it answered with, if any.

use kube::runtime::watcher;

/// The HTTP status code the API server gave for a watcher error, if it answered.
pub(crate) fn status_code(error: &watcher::Error) -> Option<u16> {
    match error {
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => Some(status.code),
        watcher::Error::WatchError(status) => Some(status.code),
        _ => None,
    }
}

/// Whether a watcher error is the API server's 410 Gone: the version watched from (or a list's
/// continue token) expired, and the watcher lists again.
pub(crate) fn is_gone(error: &watcher::Error) -> bool {
    status_code(error) == Some(410)
}
