//! Config errors: every one names the file, the line and column, the field path and what would be
//! valid, e.g. `config.yaml:12:5: peers[2].rate_limit: unknown unit "Gb/s" ...; expected ...`.
//!
//! Positions are 1-based, in characters, as editors show them. The field path is written the way
//! the operator would navigate the file: `peers[2].burst.duration` (indexes from 0).

use std::fmt;

use serde_saphyr::budget::BudgetBreach;
use serde_saphyr::{
    Error as YamlError, ExternalMessageSource, Location, MessageFormatter as _,
    UserMessageFormatter,
};

/// Why a config file was refused.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read (missing, unreadable, not UTF-8).
    #[error("{origin}: cannot read the config file: {error}")]
    Read {
        origin: String,
        error: std::io::Error,
    },
    /// The file is larger than any sensible config ([`super::MAX_CONFIG_BYTES`]).
    #[error(
        "{origin}: the config file is {size} bytes, more than the {max} accepted; a config \
         this large is a mistake (or hostile)"
    )]
    TooLarge { origin: String, size: u64, max: u64 },
    /// Not YAML, or not the shape of a config: a syntax error, an unknown or missing field, a list
    /// where a value belongs, a duplicate key.
    #[error("{0}")]
    Yaml(Box<Located>),
    /// The document exceeds a parsing limit (nesting depth, alias expansion, size): such files are
    /// refused before they can cost much time or memory.
    #[error("{0}")]
    Limit(Box<Located>),
    /// A `${VAR}` reference that cannot be substituted.
    #[error("{0}")]
    Env(Box<Located>),
    /// A value that is well-formed YAML but not valid here: out of range, a bad unit, a duplicate
    /// name, settings that do not combine.
    #[error("{0}")]
    Value(Box<Located>),
    /// The topology file `topology.slurm` names could not be read.
    #[error("{file}: cannot read the topology file (topology.slurm of {origin}): {error}")]
    TopologyRead {
        origin: String,
        file: String,
        error: std::io::Error,
    },
    /// The topology file is not one Slurm's tree or block plugin would read.
    #[error("{file}: {error} (the topology file, topology.slurm of {origin})")]
    Topology {
        origin: String,
        file: String,
        error: crate::topology::TopologyError,
    },
}

impl ConfigError {
    /// Where the error is, for all but the file-level errors (`Read`, `TooLarge`).
    pub fn located(&self) -> Option<&Located> {
        match self {
            ConfigError::Read { .. }
            | ConfigError::TooLarge { .. }
            | ConfigError::TopologyRead { .. }
            | ConfigError::Topology { .. } => None,
            ConfigError::Yaml(l)
            | ConfigError::Limit(l)
            | ConfigError::Env(l)
            | ConfigError::Value(l) => Some(l),
        }
    }
}

/// An error at a place in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    /// The file name as given (or the name passed to `Config::from_str`).
    pub origin: String,
    /// 1-based line.
    pub line: u64,
    /// 1-based column, in characters.
    pub column: u64,
    /// `peers[2].rate_limit`; empty for the document as a whole.
    pub path: String,
    /// What is wrong and what would be valid.
    pub message: String,
}

impl fmt::Display for Located {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let path = if self.path.is_empty() {
            "(top level)"
        } else {
            &self.path
        };
        write!(
            f,
            "{}:{}:{}: {path}: {}",
            self.origin, self.line, self.column, self.message
        )
    }
}

/// A line and column in the file (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pos {
    pub line: u64,
    pub column: u64,
}

impl Pos {
    /// The start of the file: where errors about the document as a whole point.
    pub const START: Pos = Pos { line: 1, column: 1 };

    pub(crate) fn from_location(location: &Location) -> Pos {
        if *location == Location::UNKNOWN || location.line() == 0 {
            return Pos::START;
        }
        Pos {
            line: location.line(),
            column: location.column().max(1),
        }
    }

    /// The position of byte `offset` of `text`.
    pub(crate) fn of_offset(text: &str, offset: usize) -> Pos {
        let offset = offset.min(text.len());
        let before = text.get(..offset).unwrap_or(text);
        let line_start = before.rfind('\n').map_or(0, |i| i + 1);
        Pos {
            line: before.matches('\n').count() as u64 + 1,
            column: before[line_start..].chars().count() as u64 + 1,
        }
    }
}

/// Longest field path kept (a key can be arbitrarily long); longer ones are cut.
const MAX_PATH_CHARS: usize = 200;

/// Longest message kept; longer ones are cut.
const MAX_MESSAGE_CHARS: usize = 1000;

/// Builds located errors for one file.
#[derive(Debug, Clone)]
pub(crate) struct Origin {
    pub name: String,
}

impl Origin {
    pub fn located(
        &self,
        pos: Pos,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> Box<Located> {
        let mut message = message.into();
        // A safety net for messages that quote the file: one screen line or two, not a megabyte.
        if let Some((cut, _)) = message.char_indices().nth(MAX_MESSAGE_CHARS) {
            message.truncate(cut);
            message.push_str("...");
        }
        let mut path = path.into();
        if let Some((cut, _)) = path.char_indices().nth(MAX_PATH_CHARS) {
            path.truncate(cut);
            path.push_str("...");
        }
        Box::new(Located {
            origin: self.name.clone(),
            line: pos.line,
            column: pos.column,
            path,
            message,
        })
    }

    pub fn value(
        &self,
        pos: Pos,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Value(self.located(pos, path, message))
    }

    pub fn env(
        &self,
        pos: Pos,
        path: impl Into<String>,
        message: impl Into<String>,
    ) -> ConfigError {
        ConfigError::Env(self.located(pos, path, message))
    }

    /// Turns a YAML deserializer error (with the field path serde was at) into a config error.
    pub fn yaml(&self, error: &YamlError, path: &str, text: &str) -> ConfigError {
        let inner = original(error);
        let pos = error
            .location()
            .map_or(Pos::START, |l| Pos::from_location(&l));
        match inner {
            YamlError::Budget {
                breach: BudgetBreach::Documents { .. },
                ..
            }
            | YamlError::MultipleDocuments { .. } => {
                return ConfigError::Yaml(self.located(
                    pos,
                    path,
                    "a second YAML document (after ---); a config is one document",
                ))
            }
            YamlError::Budget { breach, .. } => {
                return ConfigError::Limit(self.located(pos, path, budget_message(breach)))
            }
            _ => {}
        }
        let limit = matches!(
            inner,
            YamlError::AliasReplayLimitExceeded { .. }
                | YamlError::AliasExpansionLimitExceeded { .. }
                | YamlError::AliasReplayStackDepthExceeded { .. }
                | YamlError::AliasReplayCounterOverflow { .. }
        );
        let syntax = matches!(
            inner,
            YamlError::ExternalMessage { source, .. }
                if matches!(**source, ExternalMessageSource::Parser(_))
        );
        // What the field takes helps with a wrong shape, not with broken syntax, a dangling
        // alias or a duplicate key.
        let shape = matches!(
            inner,
            YamlError::Unexpected { .. }
                | YamlError::NullIntoString { .. }
                | YamlError::InvalidScalar { .. }
                | YamlError::SerdeInvalidType { .. }
                | YamlError::SerdeInvalidValue { .. }
                | YamlError::SerdeInvalidLength { .. }
                | YamlError::Message { .. }
        );
        let help = super::validate::field_help(path).filter(|_| shape);
        let mut message = match inner {
            // The shape was wrong: say so in the file's terms, with what the field takes.
            YamlError::Unexpected { expected, .. } => match *expected {
                "sequence start" => "expected a list".to_owned(),
                "mapping start" | "empty mapping start" => "expected a mapping".to_owned(),
                "string scalar" | "scalar" | "value" => {
                    "found a list or mapping where a single value belongs".to_owned()
                }
                other => format!("expected {other}"),
            },
            YamlError::UnknownAnchor { .. } => {
                "an alias (*name) that refers to no anchor (&name) defined before it".to_owned()
            }
            YamlError::NullIntoString { .. } => {
                "empty value (null); write a value, or remove the key".to_owned()
            }
            // The message without the library's own "at line X, column Y" suffix: the position
            // is already in front. Control characters are escaped so a hostile file cannot
            // write to the terminal.
            _ => UserMessageFormatter
                .format_message(inner)
                .chars()
                .map(|c| {
                    if c.is_control() {
                        c.escape_debug().to_string()
                    } else {
                        c.to_string()
                    }
                })
                .collect(),
        };
        // Unknown fields and variants already list what is valid.
        if let Some(help) = help.filter(|_| !message.contains("expected one of")) {
            if message == "expected a list" || message == "expected a mapping" {
                message = format!("expected {help}");
            } else {
                message.push_str("; expected ");
                message.push_str(&help);
            }
        }
        let line = text.lines().nth(pos.line.saturating_sub(1) as usize);
        if syntax && line.is_some_and(|l| l.contains("${")) {
            message.push_str(
                "; inside {...} or [...] a value that uses ${...} must be quoted: \"${NAME}\"",
            );
        }
        if limit {
            message.push_str(" (aliases expand to too much; write the values out)");
            return ConfigError::Limit(self.located(pos, path, message));
        }
        ConfigError::Yaml(self.located(pos, path, message))
    }
}

/// The error underneath the library's snippet and alias wrappers.
fn original(mut error: &YamlError) -> &YamlError {
    loop {
        match error {
            YamlError::WithSnippet { error: inner, .. }
            | YamlError::AliasError { error: inner, .. } => error = inner,
            _ => return error,
        }
    }
}

fn budget_message(breach: &BudgetBreach) -> String {
    use super::file::limits;
    let what = match breach {
        BudgetBreach::Depth { .. } => format!(
            "nested more than {} levels deep (a config needs about 5)",
            limits::MAX_DEPTH
        ),
        BudgetBreach::Aliases { .. } => {
            format!("more than {} aliases (*name)", limits::MAX_ALIASES)
        }
        BudgetBreach::Anchors { .. } => {
            format!("more than {} anchors (&name)", limits::MAX_ANCHORS)
        }
        BudgetBreach::Nodes { .. } | BudgetBreach::Events { .. } => format!(
            "more than {} values, after expanding aliases",
            limits::MAX_NODES
        ),
        BudgetBreach::ScalarBytes { .. } => format!(
            "more than {} bytes of values, after expanding aliases",
            limits::MAX_SCALAR_BYTES
        ),
        BudgetBreach::MergeKeys { .. } => {
            format!("more than {} merge keys (<<)", limits::MAX_MERGE_KEYS)
        }
        BudgetBreach::AliasAnchorRatio { .. } => {
            "far more aliases than anchors (an alias bomb?)".to_owned()
        }
        other => format!("a YAML size limit ({other:?})"),
    };
    format!("the document is {what}; refused to protect the exporter")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn display() {
        let origin = Origin {
            name: "config.yaml".into(),
        };
        let e = origin.value(
            Pos {
                line: 12,
                column: 5,
            },
            "peers[2].rate_limit",
            "bad; expected good",
        );
        assert_eq!(
            e.to_string(),
            "config.yaml:12:5: peers[2].rate_limit: bad; expected good"
        );
        let e = origin.value(Pos::START, "", "empty");
        assert_eq!(e.to_string(), "config.yaml:1:1: (top level): empty");
        assert_eq!(e.located().unwrap().line, 1);
    }

    #[test]
    fn offsets_to_positions() {
        let text = "ab\ncdé\nf";
        assert_eq!(Pos::of_offset(text, 0), Pos { line: 1, column: 1 });
        assert_eq!(Pos::of_offset(text, 2), Pos { line: 1, column: 3 });
        assert_eq!(Pos::of_offset(text, 3), Pos { line: 2, column: 1 });
        // Columns count characters, not bytes: `é` is two bytes.
        assert_eq!(Pos::of_offset(text, 7), Pos { line: 2, column: 4 });
        assert_eq!(Pos::of_offset(text, 8), Pos { line: 3, column: 1 });
        assert_eq!(Pos::of_offset(text, 100), Pos { line: 3, column: 2 });
    }
}
