//! Peer lists in Prometheus' `file_sd` format: a YAML or JSON list of target groups,
//!
//! ```yaml
//! - targets: ["10.0.0.2:18516", "10.0.0.3"]
//!   labels: {tor: tor-1}
//! - targets: ["10.0.0.9"]
//!   labels: {name: gpu-b09, tor: tor-2}
//! ```
//!
//! A target without a port gets the default control port (18516), as a peer's `address` does.
//! The `name` label names the peer (the `peer` label of its series); it is only valid on a group
//! of one target. Labels starting with `__` are Prometheus' own and are dropped; other label
//! names follow the config's rules for `labels`.
//!
//! Files are polled ([`POLL_INTERVAL`]) and compared by content, as the config file is: that
//! follows editors that rename a new file over the old one and Kubernetes ConfigMap symlink
//! swaps, where an inotify watch on the old inode goes silent. A file that cannot be read or
//! parsed keeps the last good content read from it.

use std::collections::hash_map::DefaultHasher;
use std::collections::BTreeMap;
use std::hash::{Hash as _, Hasher as _};
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;
use thiserror::Error;
use tokio::sync::mpsc;

use super::state::{SourceReport, Target};
use crate::config::{parse_host_port, Labels, DEFAULT_CONTROL_PORT};
use crate::label::{check_label_name, check_label_value, check_name};

/// How often the files are checked for a change: a new or changed list is taken within this.
pub const POLL_INTERVAL: Duration = Duration::from_secs(5);

/// Largest file read: 100,000 targets with a few labels each fit.
pub const MAX_FILE_BYTES: u64 = 16 << 20;

/// The label that names a target's peer.
pub const NAME_LABEL: &str = "name";

/// Why a file gave no list.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FileSdError {
    #[error("{file}: {error}")]
    Read { file: String, error: String },
    #[error("{file}: larger than {max} bytes")]
    TooLarge { file: String, max: u64 },
    #[error(
        "{file}: not a file_sd list of {{targets: [HOST:PORT, ...], labels: {{...}}}}: {error}"
    )]
    Syntax { file: String, error: String },
    #[error("{file}: group {group}: {error}")]
    Group {
        file: String,
        group: usize,
        error: String,
    },
    #[error("{pattern}: reading directory {dir}: {error}")]
    Directory {
        pattern: String,
        dir: String,
        error: String,
    },
}

/// One target group as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawGroup {
    targets: Vec<String>,
    #[serde(default)]
    labels: BTreeMap<String, String>,
}

/// Parses a file_sd list; `file` names it in errors. An empty (or blank) file is an empty list.
pub fn parse(text: &str, file: &str) -> Result<Vec<Target>, FileSdError> {
    if text.trim().is_empty() {
        return Ok(Vec::new());
    }
    let options = serde_saphyr::options! {
        with_snippet: false,
        budget: serde_saphyr::budget! {
            max_depth: 8,
            max_documents: 1,
            max_aliases: 1_000,
            max_anchors: 1_000,
        },
        alias_limits: serde_saphyr::alias_limits! {
            max_total_replayed_events: 100_000,
        },
    };
    let groups: Vec<RawGroup> =
        serde_saphyr::from_str_with_options(text, options).map_err(|e| FileSdError::Syntax {
            file: file.to_owned(),
            error: e.to_string(),
        })?;
    let mut out = Vec::new();
    for (i, group) in groups.into_iter().enumerate() {
        let targets = group_targets(group).map_err(|error| FileSdError::Group {
            file: file.to_owned(),
            group: i,
            error,
        })?;
        out.extend(targets);
    }
    Ok(out)
}

/// The targets of one group, with its labels and name.
fn group_targets(group: RawGroup) -> Result<Vec<Target>, String> {
    let mut labels = Labels::new();
    let mut name = None;
    for (k, v) in group.labels {
        if k == NAME_LABEL {
            check_name(&v).map_err(|e| format!("the peer's {NAME_LABEL}: {e}"))?;
            name = Some(v);
        } else if k.starts_with("__") {
            // Prometheus' own (`__address__`, `__meta_*`): not a label of the peer.
        } else {
            check_label_name(&k)?;
            check_label_value(&v).map_err(|e| format!("label {k}: {e}"))?;
            labels.insert(k, v);
        }
    }
    if name.is_some() && group.targets.len() != 1 {
        return Err(format!(
            "a `{NAME_LABEL}` label names one peer, but the group has {} targets",
            group.targets.len()
        ));
    }
    group
        .targets
        .iter()
        .map(|t| {
            let address = parse_host_port(t, DEFAULT_CONTROL_PORT)?;
            Ok(Target {
                address,
                name: name.clone(),
                labels: labels.clone(),
            })
        })
        .collect()
}

/// Whether `name` matches `pattern`: `*` any run of characters, `?` one character.
pub fn wildcard_match(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() && (p[pi] == '?' || p[pi] == n[ni]) {
            pi += 1;
            ni += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some((pi, ni));
            pi += 1;
        } else if let Some((sp, sn)) = star {
            pi = sp + 1;
            ni = sn + 1;
            star = Some((sp, sn + 1));
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The files `pattern` names now, sorted: itself when it has no wildcard, else the entries of
/// its directory whose name matches (wildcards are in the file name only, as Prometheus'
/// file_sd has them). A directory that cannot be read is an error; no match is an empty list.
pub fn expand(pattern: &str) -> Result<Vec<PathBuf>, FileSdError> {
    let path = Path::new(pattern);
    let file_name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
    if !file_name.contains(['*', '?']) {
        return Ok(vec![path.to_path_buf()]);
    }
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let entries = std::fs::read_dir(&dir).map_err(|e| FileSdError::Directory {
        pattern: pattern.to_owned(),
        dir: dir.display().to_string(),
        error: e.to_string(),
    })?;
    let mut files: Vec<PathBuf> = entries
        .filter_map(Result::ok)
        .filter(|e| {
            e.file_name()
                .to_str()
                .is_some_and(|n| wildcard_match(file_name, n))
        })
        .map(|e| e.path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    Ok(files)
}

/// Reads `path` (at most [`MAX_FILE_BYTES`]) as text.
fn read(path: &Path) -> Result<String, FileSdError> {
    let file = path.display().to_string();
    let read_error = |e: std::io::Error| FileSdError::Read {
        file: file.clone(),
        error: e.to_string(),
    };
    let mut bytes = Vec::new();
    std::fs::File::open(path)
        .map_err(read_error)?
        .take(MAX_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(read_error)?;
    if bytes.len() as u64 > MAX_FILE_BYTES {
        return Err(FileSdError::TooLarge {
            file,
            max: MAX_FILE_BYTES,
        });
    }
    String::from_utf8(bytes).map_err(|e| FileSdError::Read {
        file: file.clone(),
        error: format!(
            "not UTF-8 text (invalid byte at offset {})",
            e.utf8_error().valid_up_to()
        ),
    })
}

/// What was last read from one file.
#[derive(Debug, Clone)]
struct Seen {
    /// The content's hash; `None` when the last read failed.
    hash: Option<u64>,
    /// The last list the file parsed to (kept while later content fails).
    good: Option<Vec<Target>>,
    error: Option<String>,
}

/// One `files` entry (a path or a glob) and what was read from its files.
#[derive(Debug)]
pub struct FileSource {
    pattern: String,
    files: BTreeMap<PathBuf, Seen>,
    /// The directory's error, when the glob could not be expanded.
    dir_error: Option<String>,
}

impl FileSource {
    pub fn new(pattern: String) -> FileSource {
        FileSource {
            pattern,
            files: BTreeMap::new(),
            dir_error: None,
        }
    }

    /// The source's name in the metrics.
    pub fn name(&self) -> String {
        format!("file:{}", self.pattern)
    }

    /// Reads every file the pattern names (parsing only those whose content changed) and
    /// reports the union of their lists: a file that fails counts with its last good list, and
    /// its error is reported beside.
    pub fn poll(&mut self) -> SourceReport {
        let paths = match expand(&self.pattern) {
            Ok(paths) => paths,
            Err(e) => {
                self.dir_error = Some(e.to_string());
                return self.report();
            }
        };
        self.dir_error = None;
        self.files.retain(|p, _| paths.contains(p));
        for path in paths {
            self.look(path);
        }
        self.report()
    }

    fn look(&mut self, path: PathBuf) {
        let name = path.display().to_string();
        let seen = self.files.entry(path.clone()).or_insert(Seen {
            hash: None,
            good: None,
            error: None,
        });
        let text = match read(&path) {
            Ok(text) => text,
            Err(e) => {
                seen.hash = None;
                seen.error = Some(e.to_string());
                return;
            }
        };
        let mut hasher = DefaultHasher::new();
        text.hash(&mut hasher);
        let hash = Some(hasher.finish());
        if seen.hash == hash {
            return; // parsed before, with the result kept
        }
        seen.hash = hash;
        match parse(&text, &name) {
            Ok(list) => {
                seen.good = Some(list);
                seen.error = None;
            }
            Err(e) => seen.error = Some(e.to_string()),
        }
    }

    fn report(&self) -> SourceReport {
        let errors: Vec<&str> = self
            .dir_error
            .iter()
            .chain(self.files.values().filter_map(|s| s.error.as_ref()))
            .map(String::as_str)
            .collect();
        let error = (!errors.is_empty()).then(|| errors.join("; "));
        let peers = if self.dir_error.is_some() {
            None
        } else {
            Some(
                self.files
                    .values()
                    .filter_map(|s| s.good.as_ref())
                    .flatten()
                    .cloned()
                    .collect(),
            )
        };
        SourceReport {
            source: self.name(),
            peers,
            error,
        }
    }
}

/// Polls `pattern` every `every` and reports each poll, until the receiver is gone.
pub async fn run(pattern: String, every: Duration, reports: mpsc::Sender<SourceReport>) {
    let mut source = FileSource::new(pattern);
    let mut ticker = tokio::time::interval(every);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticker.tick().await;
        // Reading a large list is file I/O: off the async workers.
        let (back, report) = match tokio::task::spawn_blocking(move || {
            let report = source.poll();
            (source, report)
        })
        .await
        {
            Ok(done) => done,
            Err(_) => return,
        };
        source = back;
        if reports.send(report).await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn temp_dir(tag: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("rpe-file-sd-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn yaml_and_json_lists_parse_with_labels_names_and_default_ports() {
        let yaml = "
- targets: ['10.0.0.2:18516', 10.0.0.3, 'node-4.example:9000']
  labels: {tor: t1, __meta_x: dropped}
- targets: ['[fd00::9]']
  labels: {name: gpu-b09, tor: t2}
- targets: []
";
        let list = parse(yaml, "a.yaml").unwrap();
        let shown: Vec<(String, Option<String>, Option<String>)> = list
            .iter()
            .map(|t| {
                (
                    t.address.to_string(),
                    t.name.clone(),
                    t.labels.get("tor").cloned(),
                )
            })
            .collect();
        assert_eq!(
            shown,
            [
                ("10.0.0.2:18516".into(), None, Some("t1".into())),
                ("10.0.0.3:18516".into(), None, Some("t1".into())),
                ("node-4.example:9000".into(), None, Some("t1".into())),
                (
                    "[fd00::9]:18516".into(),
                    Some("gpu-b09".into()),
                    Some("t2".into())
                ),
            ]
        );
        assert!(!list[0].labels.contains_key("__meta_x"));
        let json =
            r#"[{"targets": ["10.0.0.2"], "labels": {"tor": "t1"}}, {"targets": ["10.0.0.3"]}]"#;
        let list = parse(json, "a.json").unwrap();
        assert_eq!(list.len(), 2);
        assert_eq!(list[1].labels, Labels::new());
    }

    #[test]
    fn an_empty_file_is_an_empty_list() {
        assert_eq!(parse("", "a.yaml").unwrap(), []);
        assert_eq!(parse("  \n", "a.yaml").unwrap(), []);
        assert_eq!(parse("[]", "a.yaml").unwrap(), []);
    }

    #[test]
    fn bad_lists_are_refused_with_the_file_and_group() {
        let cases = [
            ("targets: [a]", "not a file_sd list"),
            ("- {targets: [a], lables: {}}", "not a file_sd list"),
            ("- {labels: {a: b}}", "not a file_sd list"),
            ("- {targets: ['a b']}", "group 0"),
            ("- {targets: ['h:0']}", "invalid port"),
            (
                "- {targets: [a]}\n- {targets: [b], labels: {peer: x}}",
                "group 1",
            ),
            (
                "- {targets: [a], labels: {0x: y}}",
                "not a valid label name",
            ),
            ("- {targets: [a, b], labels: {name: n}}", "names one peer"),
            (
                "- {targets: [a], labels: {tor: \"t1\\u001b[2J\"}}",
                "label tor: label value contains \\u{1b}",
            ),
            (
                "- {targets: [a], labels: {tor: \"a\\nb\"}}",
                "control characters",
            ),
            ("- {targets: [a], labels: {job: x}}", "sets itself"),
            ("- {targets: [a], labels: {name: 'a b'}}", "whitespace"),
            // A right-to-left override would show the peer's name reversed in logs.
            (
                "- {targets: [a], labels: {name: \"gpu\\u202e01\"}}",
                "bidirectional",
            ),
            ("[{\"targets\": [\"a\"]", "not a file_sd list"),
            (
                "- {targets: [a]}\n---\n- {targets: [b]}",
                "not a file_sd list",
            ),
        ];
        let named = |n: usize| format!("- {{targets: [a], labels: {{name: {}}}}}", "n".repeat(n));
        assert!(parse(&named(253), "p.yaml").is_ok());
        let too_long = named(254);
        let cases = [
            cases.as_slice(),
            &[(too_long.as_str(), "longer than 253 characters")],
        ]
        .concat();
        for (text, want) in cases {
            let e = parse(text, "p.yaml").unwrap_err().to_string();
            assert!(e.starts_with("p.yaml"), "{text:?}: {e}");
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn huge_and_hostile_lists_are_handled_quickly() {
        let mut text = String::from("- targets:\n");
        for i in 0..50_000u32 {
            text.push_str(&format!(
                "  - 10.{}.{}.{}\n",
                i >> 16,
                (i >> 8) & 255,
                i & 255
            ));
        }
        text.push_str("  labels: {tor: t1}\n");
        let start = std::time::Instant::now();
        assert_eq!(parse(&text, "big.yaml").unwrap().len(), 50_000);
        assert!(start.elapsed() < Duration::from_secs(10));
        let deep = format!("{}{}", "[".repeat(10_000), "]".repeat(10_000));
        assert!(parse(&deep, "deep.yaml").is_err());
        let bomb = "a: &a [x, x, x, x, x, x, x, x, x, x]\nb: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a, *a]\n\
                    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b, *b]\nd: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c, *c]\n\
                    e: [*d, *d, *d, *d, *d, *d, *d, *d, *d, *d]\n";
        assert!(parse(bomb, "bomb.yaml").is_err());
    }

    #[test]
    fn wildcards_match_like_a_shell() {
        assert!(wildcard_match("*.yaml", "a.yaml"));
        assert!(wildcard_match("*.yaml", ".yaml"));
        assert!(!wildcard_match("*.yaml", "a.yaml.swp"));
        assert!(wildcard_match("peers-?.json", "peers-1.json"));
        assert!(!wildcard_match("peers-?.json", "peers-10.json"));
        assert!(wildcard_match("a*b*c", "aXXbYYc"));
        assert!(!wildcard_match("a*b*c", "aXXbYY"));
        assert!(wildcard_match("*", "anything"));
    }

    #[test]
    fn a_source_keeps_a_broken_files_last_good_list_and_drops_removed_files() {
        let dir = temp_dir("source");
        std::fs::write(dir.join("a.yaml"), "- {targets: [10.0.0.2]}\n").unwrap();
        std::fs::write(dir.join("b.yaml"), "- {targets: [10.0.0.3]}\n").unwrap();
        std::fs::write(dir.join("c.txt"), "- {targets: [10.0.0.4]}\n").unwrap();
        let mut source = FileSource::new(format!("{}/*.yaml", dir.display()));
        let hosts = |r: &SourceReport| -> Vec<String> {
            r.peers
                .as_ref()
                .unwrap()
                .iter()
                .map(|t| t.address.host())
                .collect()
        };
        let first = source.poll();
        assert_eq!(hosts(&first), ["10.0.0.2", "10.0.0.3"]);
        assert_eq!(first.error, None);
        assert!(first.source.starts_with("file:") && first.source.ends_with("*.yaml"));

        std::fs::write(dir.join("b.yaml"), "- {targets: [10.0.0.3]\n").unwrap();
        let broken = source.poll();
        assert_eq!(
            hosts(&broken),
            ["10.0.0.2", "10.0.0.3"],
            "b's last good list stays"
        );
        assert!(broken.error.as_deref().unwrap().contains("b.yaml"));
        assert_eq!(
            source.poll().error,
            broken.error,
            "still broken, same error"
        );

        std::fs::write(dir.join("b.yaml"), "- {targets: [10.0.0.5]}\n").unwrap();
        let fixed = source.poll();
        assert_eq!(hosts(&fixed), ["10.0.0.2", "10.0.0.5"]);
        assert_eq!(fixed.error, None);

        std::fs::remove_file(dir.join("a.yaml")).unwrap();
        assert_eq!(
            hosts(&source.poll()),
            ["10.0.0.5"],
            "a removed file's peers go"
        );

        let mut missing = FileSource::new(format!("{}/none/*.yaml", dir.display()));
        let report = missing.poll();
        assert_eq!(
            report.peers, None,
            "an unreadable directory keeps the last good set"
        );
        assert!(report.error.unwrap().contains("reading directory"));
        let mut literal = FileSource::new(format!("{}/absent.yaml", dir.display()));
        assert!(literal.poll().error.unwrap().contains("absent.yaml"));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
