//! The rules for Prometheus label names and values that come from outside: the config's static
//! labels, file_sd lists, and the labels a peer reports about itself. Shared by `config`,
//! `discovery` and `control`, and importing none of them.

use crate::text::{is_unsafe_char, quote};

/// Longest name (node, peer, device, label value) accepted.
pub(crate) const MAX_NAME_LEN: usize = 253;

/// Label names the exporter sets itself on its metrics; a static label with one of these names
/// would clash with them in joins (`peer_node`: the node name a peer reports, on
/// `rdma_probe_peer_info`). `instance` and `job` are Prometheus' target labels: an exported
/// one would be renamed `exported_instance` (or overwrite the target's with `honor_labels`).
pub const RESERVED_LABELS: &[&str] = &[
    "node",
    "peer",
    "peer_node",
    "device",
    "peer_device",
    "port",
    "instance",
    "job",
];

/// A label value from outside the config file (a file_sd list): at most 253 characters, none of
/// them a control character or another that must not reach a terminal or log line unescaped,
/// as the config's own label values and the values a peer says are checked.
pub(crate) fn check_label_value(value: &str) -> Result<(), String> {
    if value.chars().count() > MAX_NAME_LEN {
        return Err(format!("label value longer than {MAX_NAME_LEN} characters"));
    }
    if let Some(c) = value.chars().find(|&c| is_unsafe_char(c)) {
        return Err(format!(
            "label value contains {}: control characters are not allowed",
            c.escape_unicode()
        ));
    }
    Ok(())
}

/// A name from outside (a node, peer or device name in the config or on the command line, a
/// file_sd `name`): it becomes a label value and a log field, so it is not empty, holds no
/// whitespace and no character that must not reach a terminal unescaped (bidirectional marks
/// included), and is at most 253 characters, a DNS name's length.
pub(crate) fn check_name(name: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err("empty name".into());
    }
    if name.chars().any(|c| c.is_whitespace() || is_unsafe_char(c)) {
        return Err(format!(
            "{} contains whitespace, control or bidirectional characters",
            quote(name)
        ));
    }
    if name.chars().count() > MAX_NAME_LEN {
        return Err(format!("name longer than {MAX_NAME_LEN} characters"));
    }
    Ok(())
}

/// Prometheus label name rules, minus the names the exporter sets itself.
pub(crate) fn check_label_name(name: &str) -> Result<(), String> {
    const RULE: &str = "label names are letters, digits and _, not starting with a digit \
                        (Prometheus' rule), and not starting with __ (reserved)";
    let mut chars = name.chars();
    let valid = chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_');
    if !valid {
        return Err(format!("{} is not a valid label name; {RULE}", quote(name)));
    }
    if name.starts_with("__") {
        return Err(format!(
            "{name:?} starts with __, which Prometheus reserves; {RULE}"
        ));
    }
    if RESERVED_LABELS.contains(&name) {
        return Err(format!(
            "{name:?} is a label the exporter sets itself ({}); choose another name",
            RESERVED_LABELS.join(", ")
        ));
    }
    Ok(())
}
