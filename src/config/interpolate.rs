//! `${VAR}` and `${VAR:-default}` in config values, from the environment.
//!
//! Why per value and not on the file's text: substituting before YAML parsing would move every
//! later column on the line (so errors would point at the wrong place), would substitute inside
//! comments (an example commented out would need its variables set), and would let a variable's
//! value change the document's structure (a value containing `: ` or `{`). Here a variable can
//! only ever become (part of) one scalar value, its position is the value's own, and the value is
//! used as is: it is not interpolated again.
//!
//! Grammar, in any value (plain or quoted; not in keys):
//! - `${NAME}`: the variable's value; an unset variable is an error (a config silently missing
//!   its node name would probe the wrong peers). An empty one is the empty string.
//! - `${NAME:-default}`: the value, or `default` when the variable is unset *or empty* (as in
//!   the shell and docker compose). `default` may itself contain references.
//! - `$$`: one literal `$`. A `$` followed by anything else is itself.
//! - `NAME`: letters, digits and `_`, not starting with a digit.
//!
//! Other shell forms (`$NAME`, `${NAME-x}`, `${NAME:?x}`) are refused or left alone rather than
//! half-supported: `$NAME` stays literal text, the others are errors.

use std::borrow::Cow;

/// Nesting of defaults within defaults: more than enough for `${A:-${B:-x}}`, and a bound on the
/// recursion whatever the input.
const MAX_NESTING: usize = 8;

/// Why a value could not be interpolated; `offset` is the byte offset of the offending `$` in the
/// value, so the caller can point at it in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InterpolationError {
    pub offset: usize,
    pub message: String,
}

/// The accepted forms, quoted in errors.
pub const FORMS: &str = "write ${NAME} or ${NAME:-default} (NAME: letters, digits and _, not \
                         starting with a digit), and $$ for a literal $";

/// Substitutes every reference in `input`; borrows when there is nothing to substitute.
pub fn interpolate<'a>(
    input: &'a str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Cow<'a, str>, InterpolationError> {
    if !input.contains('$') {
        return Ok(Cow::Borrowed(input));
    }
    let mut out = String::with_capacity(input.len());
    expand(input, 0, env, 0, &mut out)?;
    Ok(Cow::Owned(out))
}

/// Expands `text` (which starts at byte `base` of the value) into `out`.
fn expand(
    text: &str,
    base: usize,
    env: &dyn Fn(&str) -> Option<String>,
    depth: usize,
    out: &mut String,
) -> Result<(), InterpolationError> {
    let bytes = text.as_bytes();
    let mut i = 0;
    while let Some(rel) = text[i..].find('$') {
        let at = i + rel;
        out.push_str(&text[i..at]);
        match bytes.get(at + 1) {
            Some(b'$') => {
                out.push('$');
                i = at + 2;
            }
            Some(b'{') => {
                let err = |message: String| InterpolationError {
                    offset: base + at,
                    message,
                };
                let body_start = at + 2;
                let close = matching_brace(&text[body_start..]).ok_or_else(|| {
                    err(format!(
                        "unterminated variable reference {:?}: missing the closing }}; {FORMS}",
                        excerpt(&text[at..])
                    ))
                })?;
                let body = &text[body_start..body_start + close];
                let (name, default) = match body.split_once(":-") {
                    Some((name, default)) => (name, Some(default)),
                    None => (body, None),
                };
                if !is_name(name) {
                    return Err(err(format!(
                        "invalid variable reference {:?}; {FORMS}",
                        excerpt(&text[at..body_start + close + 1])
                    )));
                }
                match (env(name), default) {
                    (Some(value), None) => out.push_str(&value),
                    (Some(value), Some(_)) if !value.is_empty() => out.push_str(&value),
                    (_, Some(default)) => {
                        if depth >= MAX_NESTING {
                            return Err(err(format!(
                                "variable references nested more than {MAX_NESTING} deep"
                            )));
                        }
                        let default_base = base + body_start + name.len() + 2;
                        expand(default, default_base, env, depth + 1, out)?;
                    }
                    (None, None) => {
                        return Err(err(format!(
                            "environment variable {name} is not set; set it, or give a default \
                             with ${{{name}:-default}} (write $$ for a literal $)"
                        )))
                    }
                }
                i = body_start + close + 1;
            }
            _ => {
                out.push('$');
                i = at + 1;
            }
        }
    }
    out.push_str(&text[i..]);
    Ok(())
}

/// The index of the `}` closing a reference whose body starts `text`, skipping nested `${...}`
/// and `$$`.
fn matching_brace(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 0usize;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'$' if bytes.get(i + 1) == Some(&b'$') => i += 1,
            b'$' if bytes.get(i + 1) == Some(&b'{') => {
                depth += 1;
                i += 1;
            }
            b'}' if depth == 0 => return Some(i),
            b'}' => depth -= 1,
            _ => {}
        }
        i += 1;
    }
    None
}

fn is_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// At most 40 characters of `s`, for messages about arbitrarily long values.
fn excerpt(s: &str) -> Cow<'_, str> {
    match s.char_indices().nth(40) {
        Some((cut, _)) => Cow::Owned(format!("{}...", &s[..cut])),
        None => Cow::Borrowed(s),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn env(name: &str) -> Option<String> {
        match name {
            "NODE_NAME" => Some("node-a".into()),
            "EMPTY" => Some(String::new()),
            "DOLLAR" => Some("${NODE_NAME}$$".into()),
            "_X1" => Some("x".into()),
            _ => None,
        }
    }

    fn ok(input: &str) -> String {
        interpolate(input, &env)
            .unwrap_or_else(|e| panic!("{input:?}: {e:?}"))
            .into_owned()
    }

    fn err(input: &str) -> InterpolationError {
        interpolate(input, &env).expect_err(input)
    }

    #[test]
    fn table() {
        let cases = [
            ("plain", "plain"),
            ("", ""),
            ("${NODE_NAME}", "node-a"),
            ("${NODE_NAME}.example:18516", "node-a.example:18516"),
            ("a-${NODE_NAME}-${_X1}", "a-node-a-x"),
            ("${EMPTY}", ""),
            ("${MISSING:-fallback}", "fallback"),
            ("${EMPTY:-fallback}", "fallback"),
            ("${NODE_NAME:-fallback}", "node-a"),
            ("${MISSING:-}", ""),
            ("${MISSING:-${NODE_NAME}}", "node-a"),
            ("${MISSING:-${ALSO_MISSING:-deep}}", "deep"),
            ("${MISSING:-a}b}", "ab}"),
            ("${MISSING:-x:-y}", "x:-y"),
            ("$$", "$"),
            ("$${NODE_NAME}", "${NODE_NAME}"),
            ("a$$$${X}", "a$${X}"),
            ("$NODE_NAME", "$NODE_NAME"),
            ("cost: 5$", "cost: 5$"),
            ("$ {x}", "$ {x}"),
            ("${MISSING:-$$}", "$"),
            // A value is used as is, never interpolated again.
            ("${DOLLAR}", "${NODE_NAME}$$"),
            ("}{", "}{"),
        ];
        for (input, expected) in cases {
            assert_eq!(ok(input), expected, "{input:?}");
        }
        assert!(matches!(
            interpolate("no dollar", &env),
            Ok(Cow::Borrowed(_))
        ));
    }

    #[test]
    fn errors_point_at_the_reference() {
        let e = err("${MISSING}");
        assert_eq!(e.offset, 0);
        assert!(e.message.contains("MISSING is not set"), "{e:?}");
        assert!(e.message.contains("${MISSING:-default}"), "{e:?}");
        assert_eq!(err("ab${MISSING}").offset, 2);
        // Inside a default: the offset is the nested reference's.
        assert_eq!(err("x${A:-${MISSING}}").offset, 6);
        let cases = [
            ("${", "unterminated"),
            ("${NODE_NAME", "unterminated"),
            ("${A:-${B}", "unterminated"),
            ("${}", "invalid variable reference"),
            ("${1X}", "invalid variable reference"),
            ("${A B}", "invalid variable reference"),
            ("${A-x}", "invalid variable reference"),
            ("${A:?x}", "invalid variable reference"),
            ("${A:+x}", "invalid variable reference"),
            ("${É}", "invalid variable reference"),
        ];
        for (input, needle) in cases {
            let e = err(input);
            assert!(e.message.contains(needle), "{input:?}: {e:?}");
            assert!(e.message.contains("${NAME:-default}"), "{input:?}: {e:?}");
        }
        let deep = format!("{}x{}", "${A:-".repeat(20), "}".repeat(20));
        assert!(err(&deep).message.contains("nested"));
        let long = format!("${{{}", "x".repeat(1000));
        assert!(err(&long).message.len() < 300);
    }

    proptest! {
        #[test]
        fn never_panics(s in "[-${}:a-zA-Z_0-9 ]{0,40}") {
            if let Err(e) = interpolate(&s, &env) {
                prop_assert!(e.offset < s.len());
                prop_assert_eq!(s.as_bytes()[e.offset], b'$');
            }
        }

        #[test]
        fn text_without_dollars_is_unchanged(s in "[^$]{0,40}") {
            prop_assert_eq!(ok(&s), s);
        }

        #[test]
        fn doubled_dollars_escape(s in "[a-z${}]{0,20}") {
            // Any text with every `$` doubled comes back as written.
            prop_assert_eq!(ok(&s.replace('$', "$$")), s);
        }

        #[test]
        fn defaults_apply_to_unset_and_empty(default in "[a-z0-9.:/-]{0,20}") {
            prop_assert_eq!(ok(&format!("${{MISSING:-{default}}}")), default.clone());
            prop_assert_eq!(ok(&format!("${{EMPTY:-{default}}}")), default);
        }
    }
}
