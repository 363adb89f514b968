//! Slurm hostlist expressions: `gpu[0001-0032,0040]`, `tux[0-3],tux5`, `rack[1-2]-node[01-04]`.
//!
//! An expression is a comma-separated list of items (a comma inside brackets belongs to the
//! bracket). An item is a name with zero or more bracketed range sets; several sets give their
//! cartesian product, the first set varying slowest. A range whose start is written with a
//! leading zero keeps the start's width (`n[08-10]` gives `n08`, `n09`, `n10`); one without does
//! not pad (`n[8-10]` gives `n8`, `n9`, `n10`). Names come out in the order written, duplicates
//! kept.
//!
//! [`expand`] counts the names before it makes any, so an expression naming more than its limit
//! fails at once, whatever it would have cost to expand.

use std::fmt::Write as _;

use crate::text::{is_unsafe_char, quote};

/// The most digits in a range bound: every bound fits a `u64`, and the count of names with it.
pub const MAX_BOUND_DIGITS: usize = 18;

/// The longest name an expression may produce, in bytes. With the caller's limit on the number
/// of names, this bounds the memory an expansion takes.
pub const MAX_NAME_BYTES: usize = 255;

/// Why a hostlist expression could not be expanded; each message names the offending text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostlistError {
    /// A `[` without its `]`, or a `]` without its `[`.
    #[error("unbalanced bracket in {}", quote(.0))]
    UnbalancedBracket(String),
    /// A `[` inside brackets.
    #[error("nested bracket in {}", quote(.0))]
    NestedBracket(String),
    /// Nothing between two commas, before the first or after the last.
    #[error("empty item in {}", quote(.0))]
    EmptyItem(String),
    /// `[]`, or nothing between two commas inside brackets.
    #[error("empty range in {}", quote(.0))]
    EmptyRange(String),
    /// A range such as `5-3`.
    #[error(
        "range start greater than its end: {} in {}",
        quote(range),
        quote(item)
    )]
    ReversedRange { range: String, item: String },
    /// A bound that is not a run of ASCII digits.
    #[error("non-numeric range bound: {} in {}", quote(range), quote(item))]
    NonNumeric { range: String, item: String },
    /// A bound of more than [`MAX_BOUND_DIGITS`] digits.
    #[error(
        "range bound longer than {MAX_BOUND_DIGITS} digits: {} in {}",
        quote(range),
        quote(item)
    )]
    BoundTooLong { range: String, item: String },
    /// Whitespace, `=`, a quote or a control character in a name.
    #[error("character {ch:?} not allowed in a name: {}", quote(item))]
    ForbiddenChar { ch: char, item: String },
    /// An item whose names would be longer than [`MAX_NAME_BYTES`].
    #[error("names longer than {MAX_NAME_BYTES} bytes from {}", quote(.0))]
    NameTooLong(String),
    /// The expression names more than the caller's limit.
    #[error("{} names more than {limit} hosts", quote(expr))]
    TooMany { expr: String, limit: usize },
    /// The expression names fewer than the caller's limit, but more than memory can hold.
    #[error("{} names {count} hosts, more than memory holds", quote(expr))]
    OutOfMemory { expr: String, count: u64 },
}

/// Expands `expr` into its names, in order, failing without expanding anything when it names
/// more than `limit`.
pub fn expand(expr: &str, limit: usize) -> Result<Vec<String>, HostlistError> {
    let items = split_items(expr)?
        .into_iter()
        .map(parse_item)
        .collect::<Result<Vec<_>, _>>()?;
    let total = items
        .iter()
        .try_fold(0u64, |sum, item| sum.checked_add(item.count()?))
        .filter(|&total| total <= limit as u64)
        .ok_or_else(|| HostlistError::TooMany {
            expr: expr.to_string(),
            limit,
        })?;
    let mut names = Vec::new();
    usize::try_from(total)
        .ok()
        .and_then(|total| names.try_reserve_exact(total).ok())
        .ok_or_else(|| HostlistError::OutOfMemory {
            expr: expr.to_string(),
            count: total,
        })?;
    for item in &items {
        item.expand_into(&mut names);
    }
    Ok(names)
}

/// Whether `c` may not appear in a node or switch name: whitespace, `=`, quotes, and the
/// characters that must not reach a log line or a label unescaped.
pub fn is_forbidden_name_char(c: char) -> bool {
    c.is_whitespace() || matches!(c, '=' | '"' | '\'' | '`') || is_unsafe_char(c)
}

/// The top-level items of `expr`, checking that its brackets pair up without nesting.
fn split_items(expr: &str) -> Result<Vec<&str>, HostlistError> {
    let mut items = Vec::new();
    let mut start = 0;
    let mut open = false;
    for (at, c) in expr.char_indices() {
        match (c, open) {
            ('[', true) => return Err(HostlistError::NestedBracket(expr.to_string())),
            ('[', false) => open = true,
            (']', true) => open = false,
            (']', false) => return Err(HostlistError::UnbalancedBracket(expr.to_string())),
            (',', false) => {
                items.push(expr.get(start..at).unwrap_or_default());
                start = at + 1;
            }
            _ => {}
        }
    }
    if open {
        return Err(HostlistError::UnbalancedBracket(expr.to_string()));
    }
    items.push(expr.get(start..).unwrap_or_default());
    if items.iter().any(|item| item.is_empty()) {
        return Err(HostlistError::EmptyItem(expr.to_string()));
    }
    Ok(items)
}

/// One item: literal text and range sets, in the order written.
#[derive(Debug)]
struct Item<'a> {
    parts: Vec<Part<'a>>,
}

#[derive(Debug)]
enum Part<'a> {
    Text(&'a str),
    Set(Vec<Range>),
}

/// `start..=end`, each number written at least `width` digits wide.
#[derive(Debug, Clone, Copy)]
struct Range {
    start: u64,
    end: u64,
    width: usize,
}

impl Range {
    fn count(&self) -> u64 {
        self.end - self.start + 1
    }

    /// The longest number this range writes, in bytes.
    fn max_len(&self) -> usize {
        self.width.max(self.end.to_string().len())
    }
}

/// `item` (balanced, unnested brackets: [`split_items`] checked) as text and range sets.
fn parse_item(item: &str) -> Result<Item<'_>, HostlistError> {
    let mut parts = Vec::new();
    let mut rest = item;
    while let Some(open) = rest.find('[') {
        let close = rest
            .find(']')
            .ok_or_else(|| HostlistError::UnbalancedBracket(item.to_string()))?;
        let (text, set) = (
            rest.get(..open).unwrap_or_default(),
            rest.get(open + 1..close).unwrap_or_default(),
        );
        parts.push(Part::Text(check_text(text, item)?));
        parts.push(Part::Set(parse_set(set, item)?));
        rest = rest.get(close + 1..).unwrap_or_default();
    }
    parts.push(Part::Text(check_text(rest, item)?));
    let parsed = Item { parts };
    if parsed.max_name_len() > MAX_NAME_BYTES {
        return Err(HostlistError::NameTooLong(item.to_string()));
    }
    Ok(parsed)
}

/// `text`, a literal part of `item`, if it has no forbidden character.
fn check_text<'a>(text: &'a str, item: &str) -> Result<&'a str, HostlistError> {
    match text.chars().find(|&c| is_forbidden_name_char(c)) {
        Some(ch) => Err(HostlistError::ForbiddenChar {
            ch,
            item: item.to_string(),
        }),
        None => Ok(text),
    }
}

/// The ranges between a pair of brackets: `0001-0032,0040`.
fn parse_set(set: &str, item: &str) -> Result<Vec<Range>, HostlistError> {
    set.split(',')
        .map(|range| parse_range(range, item))
        .collect()
}

/// One range, `7` or `08-10`.
fn parse_range(range: &str, item: &str) -> Result<Range, HostlistError> {
    if range.is_empty() {
        return Err(HostlistError::EmptyRange(item.to_string()));
    }
    let (first, last) = range.split_once('-').unwrap_or((range, range));
    let start = parse_bound(first, range, item)?;
    let end = parse_bound(last, range, item)?;
    if start > end {
        return Err(HostlistError::ReversedRange {
            range: range.to_string(),
            item: item.to_string(),
        });
    }
    let width = if first.starts_with('0') {
        first.len()
    } else {
        0
    };
    Ok(Range { start, end, width })
}

/// A bound: one to [`MAX_BOUND_DIGITS`] ASCII digits.
fn parse_bound(digits: &str, range: &str, item: &str) -> Result<u64, HostlistError> {
    let context = || (range.to_string(), item.to_string());
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        let (range, item) = context();
        return Err(HostlistError::NonNumeric { range, item });
    }
    if digits.len() > MAX_BOUND_DIGITS {
        let (range, item) = context();
        return Err(HostlistError::BoundTooLong { range, item });
    }
    digits.parse().map_err(|_| {
        let (range, item) = context();
        HostlistError::NonNumeric { range, item }
    })
}

impl Item<'_> {
    /// How many names this item gives; `None` past `u64::MAX`.
    fn count(&self) -> Option<u64> {
        self.sets().try_fold(1u64, |product, set| {
            let size = set
                .iter()
                .try_fold(0u64, |sum, range| sum.checked_add(range.count()))?;
            product.checked_mul(size)
        })
    }

    /// The longest name this item gives, in bytes.
    fn max_name_len(&self) -> usize {
        self.parts
            .iter()
            .map(|part| match part {
                Part::Text(text) => text.len(),
                Part::Set(set) => set.iter().map(Range::max_len).max().unwrap_or(0),
            })
            .fold(0usize, usize::saturating_add)
    }

    fn sets(&self) -> impl Iterator<Item = &[Range]> {
        self.parts.iter().filter_map(|part| match part {
            Part::Set(set) => Some(set.as_slice()),
            Part::Text(_) => None,
        })
    }

    /// Appends this item's names to `names`, the last set varying fastest.
    fn expand_into(&self, names: &mut Vec<String>) {
        let sets: Vec<&[Range]> = self.sets().collect();
        let mut odometer = Odometer::new(&sets);
        loop {
            names.push(self.name_at(&odometer));
            if !odometer.advance(&sets) {
                return;
            }
        }
    }

    /// The name at the odometer's current position.
    fn name_at(&self, odometer: &Odometer) -> String {
        let mut name = String::new();
        let mut digits = odometer.digits.iter();
        for part in &self.parts {
            match part {
                Part::Text(text) => name.push_str(text),
                Part::Set(_) => {
                    if let Some(digit) = digits.next() {
                        // Writing to a String cannot fail.
                        let _ = write!(name, "{:0width$}", digit.value, width = digit.width);
                    }
                }
            }
        }
        name
    }
}

/// A position in an item's cartesian product: for each set, which range and which number.
struct Odometer {
    digits: Vec<Digit>,
}

struct Digit {
    range: usize,
    value: u64,
    width: usize,
}

impl Odometer {
    /// Every set at its first number. Sets are never empty: [`parse_set`] gives at least one
    /// range, and a range at least one number.
    fn new(sets: &[&[Range]]) -> Self {
        let digits = sets.iter().map(|set| Self::first_digit(set)).collect();
        Odometer { digits }
    }

    fn first_digit(set: &[Range]) -> Digit {
        let first = set.first().copied().unwrap_or(Range {
            start: 0,
            end: 0,
            width: 0,
        });
        Digit {
            range: 0,
            value: first.start,
            width: first.width,
        }
    }

    /// Moves to the next position; false after the last.
    fn advance(&mut self, sets: &[&[Range]]) -> bool {
        for (digit, set) in self.digits.iter_mut().zip(sets).rev() {
            if Self::step(digit, set) {
                return true;
            }
            *digit = Self::first_digit(set);
        }
        false
    }

    /// Moves one digit to its set's next number; false when it was at the set's last.
    fn step(digit: &mut Digit, set: &[Range]) -> bool {
        let Some(range) = set.get(digit.range) else {
            return false;
        };
        if digit.value < range.end {
            digit.value += 1;
            return true;
        }
        match set.get(digit.range + 1) {
            Some(next) => {
                *digit = Digit {
                    range: digit.range + 1,
                    value: next.start,
                    width: next.width,
                };
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(expr: &str) -> Vec<String> {
        expand(expr, 1_000_000).unwrap_or_else(|e| panic!("{expr}: {e}"))
    }

    fn error(expr: &str) -> HostlistError {
        match expand(expr, 1_000_000) {
            Ok(names) => panic!("{expr} expanded to {names:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn a_plain_name_is_itself() {
        assert_eq!(names("tux5"), ["tux5"]);
    }

    #[test]
    fn a_range_counts_up_without_padding() {
        assert_eq!(names("tux[0-3]"), ["tux0", "tux1", "tux2", "tux3"]);
        assert_eq!(names("n[8-10]"), ["n8", "n9", "n10"]);
        assert_eq!(names("n[7]"), ["n7"]);
    }

    #[test]
    fn a_leading_zero_keeps_the_start_width() {
        assert_eq!(names("gpu[0001-0003]"), ["gpu0001", "gpu0002", "gpu0003"]);
        assert_eq!(names("n[08-10]"), ["n08", "n09", "n10"]);
        assert_eq!(names("n[098-100]"), ["n098", "n099", "n100"]);
        assert_eq!(names("n[0-2]"), ["n0", "n1", "n2"]);
        assert_eq!(names("n[007]"), ["n007"]);
    }

    #[test]
    fn commas_inside_brackets_belong_to_the_bracket() {
        assert_eq!(
            names("gpu[0001-0002,0040],tux5"),
            ["gpu0001", "gpu0002", "gpu0040", "tux5"]
        );
        assert_eq!(names("n[1,3],m[2]"), ["n1", "n3", "m2"]);
    }

    #[test]
    fn each_range_in_a_set_keeps_its_own_width() {
        assert_eq!(names("n[1-2,08-09]"), ["n1", "n2", "n08", "n09"]);
    }

    #[test]
    fn several_sets_give_their_product_first_set_slowest() {
        assert_eq!(
            names("rack[1-2]-node[01-02]"),
            [
                "rack1-node01",
                "rack1-node02",
                "rack2-node01",
                "rack2-node02"
            ]
        );
        assert_eq!(names("a[1,3]b[0-1]c"), ["a1b0c", "a1b1c", "a3b0c", "a3b1c"]);
        assert_eq!(names("[1-2][5]"), ["15", "25"]);
    }

    #[test]
    fn order_and_duplicates_are_kept() {
        assert_eq!(names("b,a,b,n[2,1,2]"), ["b", "a", "b", "n2", "n1", "n2"]);
    }

    #[test]
    fn unbalanced_brackets_fail() {
        for expr in ["gpu[02-", "gpu]1", "gpu[1-2]]", "a[1],b[2"] {
            assert!(
                matches!(error(expr), HostlistError::UnbalancedBracket(ref t) if t == expr),
                "{expr}"
            );
        }
        assert_eq!(
            error("gpu[02-").to_string(),
            r#"unbalanced bracket in "gpu[02-""#
        );
    }

    #[test]
    fn nested_brackets_fail() {
        assert!(matches!(error("n[1[2]]"), HostlistError::NestedBracket(_)));
    }

    #[test]
    fn empty_items_and_ranges_fail() {
        for expr in ["", ",", "a,,b", "a,", ",a"] {
            assert!(matches!(error(expr), HostlistError::EmptyItem(_)), "{expr}");
        }
        for expr in ["n[]", "n[1,]", "n[,1]"] {
            assert!(
                matches!(error(expr), HostlistError::EmptyRange(_)),
                "{expr}"
            );
        }
    }

    #[test]
    fn a_reversed_range_fails() {
        let e = error("n[5-3]");
        assert!(matches!(e, HostlistError::ReversedRange { .. }));
        assert_eq!(
            e.to_string(),
            r#"range start greater than its end: "5-3" in "n[5-3]""#
        );
    }

    #[test]
    fn non_numeric_bounds_fail() {
        for expr in [
            "n[a-3]", "n[1-b]", "n[1-]", "n[-1]", "n[1-2-3]", "n[ 1]", "n[+1]",
        ] {
            assert!(
                matches!(error(expr), HostlistError::NonNumeric { .. }),
                "{expr}: {}",
                error(expr)
            );
        }
        assert!(matches!(
            error("n[1234567890123456789]"),
            HostlistError::BoundTooLong { .. }
        ));
    }

    #[test]
    fn names_are_free_of_whitespace_equals_quotes_and_controls() {
        for (expr, bad) in [
            ("a b", ' '),
            ("a\tb", '\t'),
            ("n=1", '='),
            ("\"n1\"", '"'),
            ("n'1", '\''),
            ("n\u{1b}1", '\u{1b}'),
            ("n[1]\u{7f}", '\u{7f}'),
            ("n\u{202e}1", '\u{202e}'),
        ] {
            assert_eq!(
                error(expr),
                HostlistError::ForbiddenChar {
                    ch: bad,
                    item: expr.to_string()
                },
                "{expr:?}"
            );
        }
        assert!(error("n\u{1b}").to_string().contains(r"\u{1b}"));
    }

    #[test]
    fn over_the_limit_fails_before_expanding() {
        assert_eq!(expand("n[1-4]", 4).map(|n| n.len()), Ok(4));
        assert_eq!(
            expand("n[1-4],m", 4),
            Err(HostlistError::TooMany {
                expr: "n[1-4],m".to_string(),
                limit: 4
            })
        );
        assert!(expand("n", 0).is_err());
        // Would take terabytes if it were expanded first; must return at once.
        let started = std::time::Instant::now();
        assert!(matches!(
            expand("n[0-999999999999]", 1_000_000),
            Err(HostlistError::TooMany { .. })
        ));
        assert!(matches!(
            expand("a[0-999999999999999999]b[0-999999999999999999]", usize::MAX),
            Err(HostlistError::TooMany { .. })
        ));
        assert!(matches!(
            expand("n[0-999999999999999999]", usize::MAX),
            Err(HostlistError::OutOfMemory { .. })
        ));
        let product = "n".to_string() + &"[0-9]".repeat(40);
        assert!(matches!(
            expand(&product, usize::MAX),
            Err(HostlistError::TooMany { .. })
        ));
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn long_names_fail() {
        let long = "n".repeat(MAX_NAME_BYTES);
        assert_eq!(names(&long), [long.as_str()]);
        assert!(matches!(
            error(&format!("{long}[1]")),
            HostlistError::NameTooLong(_)
        ));
        let padded = format!("n[{}]", "0".repeat(MAX_NAME_BYTES));
        assert!(matches!(error(&padded), HostlistError::BoundTooLong { .. }));
    }

    #[test]
    fn the_largest_bounds_do_not_overflow() {
        assert_eq!(
            names("n[999999999999999998-999999999999999999]"),
            ["n999999999999999998", "n999999999999999999"]
        );
    }

    #[test]
    fn error_messages_are_cut_and_escaped() {
        let long = format!("n[{}", "1".repeat(10_000));
        let message = error(&long).to_string();
        assert!(message.len() < 100, "{message}");
    }
}
