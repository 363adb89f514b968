//! Text that came from outside (a config file, a peer) on its way to a terminal, a log line or
//! a metric label: which characters must not get there unescaped, how they are escaped, and how
//! a value is quoted in an error message. Shared by `config`, `control` and `label`, and
//! importing none of them.

use std::borrow::Cow;

/// `value` quoted for a message, cut to 40 characters: values can be arbitrarily long.
pub(crate) fn quote(value: &str) -> String {
    match value.char_indices().nth(40) {
        Some((cut, _)) => format!("{:?}...", &value[..cut]),
        None => format!("{value:?}"),
    }
}

/// Whether `c` must not reach a terminal, a log line or a label unescaped: C0 and C1 controls
/// (ESC starts terminal sequences, CR and LF forge log lines, NUL truncates C strings), the Unicode
/// line and paragraph separators (line breaks to some log viewers), and the bidirectional marks,
/// embeddings, overrides and isolates (they reorder what is displayed around them).
pub fn is_unsafe_char(c: char) -> bool {
    c.is_control()
        || matches!(
            c,
            '\u{2028}'
                | '\u{2029}'
                | '\u{061c}'
                | '\u{200e}'
                | '\u{200f}'
                | '\u{202a}'..='\u{202e}'
                | '\u{2066}'..='\u{2069}'
        )
}

/// `text` with every [`is_unsafe_char`] written as Rust's `\u{..}` escape, so the reader still
/// sees which character the peer sent. Borrowed when there is nothing to escape, which is the
/// normal case.
pub fn escape_unsafe_chars(text: &str) -> Cow<'_, str> {
    if !text.chars().any(is_unsafe_char) {
        return Cow::Borrowed(text);
    }
    let mut escaped = String::with_capacity(text.len() + 16);
    for c in text.chars() {
        if is_unsafe_char(c) {
            escaped.extend(c.escape_unicode());
        } else {
            escaped.push(c);
        }
    }
    Cow::Owned(escaped)
}
