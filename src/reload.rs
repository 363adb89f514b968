//! A request to reload the config file, from whichever source asks: `POST /-/reload` (`http`),
//! SIGHUP (`cli`) or the file watcher (`exporter`); the service loop answers it. A module of its
//! own so that `http` and `exporter` share it without importing each other.

use tokio::sync::oneshot;

/// A reload asked over HTTP or by a signal; the answer says whether the new file was taken.
#[derive(Debug)]
pub struct ReloadRequest {
    pub reply: Option<oneshot::Sender<Result<(), String>>>,
}
