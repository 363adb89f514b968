//! Reload when the config file changes.
//!
//! The file is re-read every few seconds and its content compared with what was last seen:
//! that follows every way a file gets replaced (editors that write a new file and rename it,
//! `kubectl apply` on a ConfigMap, whose mounted files are symlinks swapped atomically to a new
//! directory) without inotify's corner cases (a watch on the old inode goes silent after a
//! rename). The file is at most 1 MiB, so the cost is negligible.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash as _, Hasher as _};
use std::path::{Path, PathBuf};
use std::time::Duration;

use tokio::sync::mpsc;

use crate::reload::ReloadRequest;

/// How often the config file is checked for a change.
pub const POLL_INTERVAL: Duration = Duration::from_secs(2);

/// What the watcher remembers of the file: a hash of its content, or that it could not be read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Content(u64),
    Unreadable,
}

/// Reads the file as [`Seen`].
pub fn look(path: &Path) -> Seen {
    match std::fs::read(path) {
        Ok(bytes) => {
            let mut hasher = DefaultHasher::new();
            bytes.hash(&mut hasher);
            Seen::Content(hasher.finish())
        }
        Err(_) => Seen::Unreadable,
    }
}

/// Whether a change from `before` to `now` asks for a reload: any new content does (a broken
/// file too, so that its error is reported and `config_reload_success` drops); a file that
/// disappears does not (a ConfigMap update removes and recreates links; the next look sees the
/// new content).
pub fn wants_reload(before: Seen, now: Seen) -> bool {
    matches!(now, Seen::Content(_)) && now != before
}

/// Asks for a reload each time the content of `path` changes, until the receiver is gone.
pub async fn watch_file(path: PathBuf, reloads: mpsc::Sender<ReloadRequest>, every: Duration) {
    let mut seen = look(&path);
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker.tick().await; // the first tick is immediate
    loop {
        ticker.tick().await;
        let now = look(&path);
        if wants_reload(seen, now) {
            tracing::info!(file = %path.display(), "config file changed: reloading");
            if reloads.send(ReloadRequest { reply: None }).await.is_err() {
                return;
            }
        }
        if now != Seen::Unreadable {
            seen = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_new_readable_content_asks_for_a_reload() {
        let a = Seen::Content(1);
        let b = Seen::Content(2);
        assert!(!wants_reload(a, a));
        assert!(wants_reload(a, b));
        assert!(!wants_reload(a, Seen::Unreadable));
        assert!(wants_reload(Seen::Unreadable, a));
    }

    /// On the paused clock: the watcher has looked at the unchanged file several times (every
    /// timer before the test's own fires first) before "no change, no reload" is checked.
    #[tokio::test(start_paused = true)]
    async fn a_symlink_swap_is_seen_as_a_change() {
        let dir = std::env::temp_dir().join(format!("rpe-watch-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("v1")).unwrap();
        std::fs::create_dir_all(dir.join("v2")).unwrap();
        std::fs::write(dir.join("v1/config.yaml"), "node: a\n").unwrap();
        std::fs::write(dir.join("v2/config.yaml"), "node: b\n").unwrap();
        // The ConfigMap layout: config.yaml -> ..data/config.yaml, ..data -> v1 (then v2).
        std::os::unix::fs::symlink("v1", dir.join("..data")).unwrap();
        std::os::unix::fs::symlink("..data/config.yaml", dir.join("config.yaml")).unwrap();
        let path = dir.join("config.yaml");
        let (tx, mut rx) = mpsc::channel(4);
        let watcher = tokio::spawn(watch_file(path, tx, Duration::from_millis(20)));
        tokio::time::sleep(Duration::from_millis(20 * 5 + 10)).await;
        assert!(rx.try_recv().is_err(), "no change, no reload");
        // Swap atomically, as the kubelet does: a new link renamed over the old one.
        std::os::unix::fs::symlink("v2", dir.join("..data_tmp")).unwrap();
        std::fs::rename(dir.join("..data_tmp"), dir.join("..data")).unwrap();
        let got = tokio::time::timeout(Duration::from_secs(5), rx.recv()).await;
        assert!(matches!(got, Ok(Some(_))), "the swap triggers a reload");
        watcher.abort();
        let _ = std::fs::remove_dir_all(&dir);
    }
}
