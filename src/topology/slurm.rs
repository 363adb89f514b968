//! Slurm's `topology.conf`, for both of its plugins, read into each node's place in the network.
//!
//! The tree plugin's lines name a switch and what hangs below it: `SwitchName=leaf07
//! Nodes=gpu[0224-0255]` (a leaf switch and its nodes), `SwitchName=spine1 Switches=leaf[00-15]`
//! (a switch above switches); other keys (`LinkSpeed=`) are ignored. The block plugin's lines name
//! a block and its nodes, `BlockName=b3 Nodes=gpu[0001-0018]`, besides one `BlockSizes=4,16,64`
//! line, accepted and ignored.
//!
//! Keys are case-insensitive `key=value` pairs separated by whitespace; `#` starts a comment, a
//! line ending in `\` continues on the next, blank lines are skipped. Only one level above a leaf
//! is used, so a cycle among switches cannot matter.

use std::collections::btree_map::Entry;
use std::collections::{BTreeMap, HashMap};

use super::hostlist::{self, is_forbidden_name_char, HostlistError};
use crate::text::{escape_unsafe_chars, quote};

/// The most node and switch names one file may list, counted as expanded: ten times the largest
/// fleet the exporter is built for (10,000 nodes), so a mistaken or hostile range costs a reload
/// a few tens of MiB and milliseconds, not gigabytes.
pub const MAX_NAMES: usize = 100_000;

/// The most lines one file may have.
pub const MAX_LINES: usize = 100_000;

/// The longest line, continuation lines joined, in bytes.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The most characters of a line an error quotes.
const MAX_ENTRY_CHARS: usize = 200;

/// Why a `topology.conf` was refused: the line (1-based; a continued line's first), its text, and
/// what is wrong with it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {entry}: {message}")]
pub struct TopologyError {
    pub line: usize,
    /// The line's text, at most 200 characters, control characters escaped.
    pub entry: String,
    pub message: String,
}

/// Where one node sits: the tree plugin's leaf switch (its ToR) and the switch above that, and
/// the block plugin's block. Each is absent when the file does not say.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodePlacement {
    pub leaf: Option<String>,
    pub spine: Option<String>,
    pub block: Option<String>,
}

/// Every node a `topology.conf` names, with its placement.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Topology {
    nodes: BTreeMap<String, NodePlacement>,
}

impl Topology {
    /// Where `node` sits; `None` when the file does not name it.
    pub fn placement(&self, node: &str) -> Option<&NodePlacement> {
        self.nodes.get(node)
    }

    /// Every node and its placement, by name.
    pub fn nodes(&self) -> impl Iterator<Item = (&str, &NodePlacement)> {
        self.nodes.iter().map(|(name, at)| (name.as_str(), at))
    }

    /// How many nodes the file names.
    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    /// `node`'s placement as metric labels: `tor`, `spine` and `block`, in that order, each only
    /// when known. Empty for a node the file does not name.
    pub fn labels(&self, node: &str) -> Vec<(&'static str, String)> {
        let Some(at) = self.placement(node) else {
            return Vec::new();
        };
        [
            ("tor", &at.leaf),
            ("spine", &at.spine),
            ("block", &at.block),
        ]
        .into_iter()
        .filter_map(|(label, value)| value.clone().map(|value| (label, value)))
        .collect()
    }
}

/// Reads a `topology.conf`'s text; the first problem found is the error.
pub fn parse(text: &str) -> Result<Topology, TopologyError> {
    let mut builder = Builder::default();
    for line in LogicalLines::new(text) {
        let line = line?;
        let pairs = key_values(&line)?;
        builder.add(&line, &pairs)?;
    }
    Ok(builder.finish())
}

/// One line as the parser sees it: comment removed, continuations joined.
#[derive(Debug)]
struct Line {
    /// 1-based; a continued line's first.
    number: usize,
    text: String,
}

impl Line {
    fn error(&self, message: impl Into<String>) -> TopologyError {
        TopologyError {
            line: self.number,
            entry: entry(&self.text),
            message: message.into(),
        }
    }
}

/// `text` trimmed, escaped and cut to [`MAX_ENTRY_CHARS`] characters for an error.
fn entry(text: &str) -> String {
    let escaped = escape_unsafe_chars(text.trim());
    if escaped.chars().count() <= MAX_ENTRY_CHARS {
        return escaped.into_owned();
    }
    let mut cut: String = escaped.chars().take(MAX_ENTRY_CHARS - 3).collect();
    cut.push_str("...");
    cut
}

/// The non-blank lines of a file, comments removed and continuations joined, checked against
/// [`MAX_LINES`] and [`MAX_LINE_BYTES`].
struct LogicalLines<'a> {
    physical: std::iter::Enumerate<std::str::Lines<'a>>,
}

impl<'a> LogicalLines<'a> {
    fn new(text: &'a str) -> Self {
        LogicalLines {
            physical: text.lines().enumerate(),
        }
    }
}

impl Iterator for LogicalLines<'_> {
    type Item = Result<Line, TopologyError>;

    fn next(&mut self) -> Option<Self::Item> {
        let mut joined: Option<Line> = None;
        for (index, raw) in self.physical.by_ref() {
            let number = index + 1;
            if let Err(e) = check_physical(number, raw) {
                return Some(Err(e));
            }
            let (content, continues) = strip_continuation(strip_comment(raw));
            let line = joined.get_or_insert_with(|| Line {
                number,
                text: String::new(),
            });
            line.text.push_str(content);
            if line.text.len() > MAX_LINE_BYTES {
                return Some(Err(line.error(too_long())));
            }
            if continues {
                continue;
            }
            match joined.take() {
                Some(line) if !line.text.trim().is_empty() => return Some(Ok(line)),
                _ => {}
            }
        }
        joined.filter(|line| !line.text.trim().is_empty()).map(Ok)
    }
}

/// A physical line within [`MAX_LINES`] and [`MAX_LINE_BYTES`].
fn check_physical(number: usize, raw: &str) -> Result<(), TopologyError> {
    let line = || Line {
        number,
        text: raw.to_string(),
    };
    if number > MAX_LINES {
        return Err(line().error(format!("more than {MAX_LINES} lines")));
    }
    if raw.len() > MAX_LINE_BYTES {
        return Err(line().error(too_long()));
    }
    Ok(())
}

fn too_long() -> String {
    format!("line longer than {MAX_LINE_BYTES} bytes")
}

/// `raw` up to its `#`, if any.
fn strip_comment(raw: &str) -> &str {
    raw.split_once('#').map_or(raw, |(content, _)| content)
}

/// `content` without a final `\` (trailing whitespace after it allowed), and whether it had one.
/// What precedes the `\` is kept as written, so `Nodes=a,\` and `b` join into `Nodes=a,b`.
fn strip_continuation(content: &str) -> (&str, bool) {
    match content.trim_end().strip_suffix('\\') {
        Some(before) => (before, true),
        None => (content, false),
    }
}

/// The keys the parser knows; any other key on a switch or block line is ignored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Key {
    SwitchName,
    BlockName,
    BlockSizes,
    Nodes,
    Switches,
    Other,
}

impl Key {
    fn of(key: &str) -> Key {
        const KEYS: [(&str, Key); 5] = [
            ("SwitchName", Key::SwitchName),
            ("BlockName", Key::BlockName),
            ("BlockSizes", Key::BlockSizes),
            ("Nodes", Key::Nodes),
            ("Switches", Key::Switches),
        ];
        KEYS.iter()
            .find(|(name, _)| name.eq_ignore_ascii_case(key))
            .map_or(Key::Other, |&(_, known)| known)
    }
}

/// One `key=value` pair, the key as written kept for messages.
#[derive(Debug)]
struct Pair<'a> {
    key: Key,
    written: &'a str,
    value: &'a str,
}

/// The line's whitespace-separated `key=value` pairs.
fn key_values(line: &Line) -> Result<Vec<Pair<'_>>, TopologyError> {
    line.text
        .split_whitespace()
        .map(|token| match token.split_once('=') {
            Some((written, value)) if !written.is_empty() => Ok(Pair {
                key: Key::of(written),
                written,
                value,
            }),
            _ => Err(line.error(format!("expected key=value, found {}", quote(token)))),
        })
        .collect()
}

/// What a switch or block line lists below its name.
#[derive(Debug, Default)]
struct Members<'a> {
    nodes: Option<&'a str>,
    switches: Option<&'a str>,
}

/// The pairs after a line's leading one, each known key at most once.
fn members<'a>(line: &Line, rest: &[Pair<'a>]) -> Result<Members<'a>, TopologyError> {
    let mut members = Members::default();
    for pair in rest {
        let slot = match pair.key {
            Key::Nodes => &mut members.nodes,
            Key::Switches => &mut members.switches,
            Key::Other => continue,
            _ => {
                return Err(line.error(format!(
                    "{} after the line's first key: one entry a line",
                    pair.written
                )))
            }
        };
        if slot.replace(pair.value).is_some() {
            return Err(line.error(format!("{} given twice", pair.written)));
        }
    }
    Ok(members)
}

/// A switch or block name, or the reason it is not one.
fn check_name(name: &str, what: &str) -> Result<(), String> {
    if name.is_empty() {
        return Err(format!("empty {what} name"));
    }
    if let Some(c) = name.chars().find(|&c| is_forbidden_name_char(c)) {
        return Err(format!(
            "character {c:?} not allowed in {what} name {}",
            quote(name)
        ));
    }
    if name.contains(['[', ']', ',']) {
        return Err(format!(
            "{what} name {} is one name, not a hostlist",
            quote(name)
        ));
    }
    Ok(())
}

/// A node's placement while the file is read, with the lines that set it.
#[derive(Debug, Default)]
struct Placed {
    leaf: Option<(String, usize)>,
    block: Option<(String, usize)>,
}

/// The two things a node is placed in: a leaf switch, a block.
#[derive(Debug, Clone, Copy)]
enum Group {
    Leaf,
    Block,
}

impl Group {
    fn slot(self, placed: &mut Placed) -> &mut Option<(String, usize)> {
        match self {
            Group::Leaf => &mut placed.leaf,
            Group::Block => &mut placed.block,
        }
    }

    fn slot_of(self, placed: &Placed) -> Option<&(String, usize)> {
        match self {
            Group::Leaf => placed.leaf.as_ref(),
            Group::Block => placed.block.as_ref(),
        }
    }

    /// How a message says a node is in it: "under switch", "in block".
    fn relation(self) -> &'static str {
        match self {
            Group::Leaf => "under switch",
            Group::Block => "in block",
        }
    }
}

/// The file read so far.
#[derive(Debug, Default)]
struct Builder {
    nodes: BTreeMap<String, Placed>,
    /// Each switch named in a `Switches=`, with its parent and that parent's line.
    parents: HashMap<String, (String, usize)>,
    /// Each switch defined, with its line.
    switches: HashMap<String, usize>,
    /// Each block defined, with its line.
    blocks: HashMap<String, usize>,
    /// Names expanded so far, against [`MAX_NAMES`].
    names: usize,
}

impl Builder {
    /// Adds one line's entry.
    fn add(&mut self, line: &Line, pairs: &[Pair<'_>]) -> Result<(), TopologyError> {
        let Some((first, rest)) = pairs.split_first() else {
            return Ok(());
        };
        match first.key {
            Key::SwitchName => self.add_switch(line, first.value, members(line, rest)?),
            Key::BlockName => self.add_block(line, first.value, members(line, rest)?),
            Key::BlockSizes => Ok(()),
            _ => Err(line.error(format!(
                "unknown key {}: a line starts with SwitchName, BlockName or BlockSizes",
                quote(first.written)
            ))),
        }
    }

    /// `SwitchName=name Nodes=... Switches=...`: its nodes' leaf, its switches' parent.
    fn add_switch(
        &mut self,
        line: &Line,
        name: &str,
        members: Members<'_>,
    ) -> Result<(), TopologyError> {
        check_name(name, "switch").map_err(|e| line.error(e))?;
        if members.nodes.is_none() && members.switches.is_none() {
            return Err(line.error(format!(
                "switch {} has neither Nodes= nor Switches=",
                quote(name)
            )));
        }
        define(&mut self.switches, "switch", name, line)?;
        if let Some(nodes) = members.nodes {
            for node in self.expand(line, "Nodes", nodes)? {
                self.place(line, node, Group::Leaf, name)?;
            }
        }
        if let Some(switches) = members.switches {
            for child in self.expand(line, "Switches", switches)? {
                self.set_parent(line, child, name)?;
            }
        }
        Ok(())
    }

    /// `BlockName=name Nodes=...`: its nodes' block.
    fn add_block(
        &mut self,
        line: &Line,
        name: &str,
        members: Members<'_>,
    ) -> Result<(), TopologyError> {
        check_name(name, "block").map_err(|e| line.error(e))?;
        let Some(nodes) = members.nodes else {
            return Err(line.error(format!("block {} has no Nodes=", quote(name))));
        };
        define(&mut self.blocks, "block", name, line)?;
        for node in self.expand(line, "Nodes", nodes)? {
            self.place(line, node, Group::Block, name)?;
        }
        Ok(())
    }

    /// The names of a `Nodes=` or `Switches=` value, within what is left of [`MAX_NAMES`].
    fn expand(
        &mut self,
        line: &Line,
        key: &str,
        value: &str,
    ) -> Result<Vec<String>, TopologyError> {
        if value.is_empty() {
            return Err(line.error(format!("empty {key}=")));
        }
        let names =
            hostlist::expand(value, MAX_NAMES.saturating_sub(self.names)).map_err(|e| match e {
                HostlistError::TooMany { .. } => line.error(format!(
                    "the file names more than {MAX_NAMES} nodes and switches"
                )),
                other => line.error(other.to_string()),
            })?;
        self.names += names.len();
        Ok(names)
    }

    /// Puts `node` in `group` `name`; an error when the file already put it in another.
    fn place(
        &mut self,
        line: &Line,
        node: String,
        group: Group,
        name: &str,
    ) -> Result<(), TopologyError> {
        let entry = self.nodes.entry(node);
        if let Entry::Occupied(placed) = &entry {
            if let Some((other, at)) = group.slot_of(placed.get()) {
                if other != name {
                    return Err(line.error(format!(
                        "node {} already {} {} (line {at})",
                        quote(placed.key()),
                        group.relation(),
                        quote(other)
                    )));
                }
            }
        }
        let slot = group.slot(entry.or_default());
        if slot.is_none() {
            *slot = Some((name.to_string(), line.number));
        }
        Ok(())
    }

    fn set_parent(
        &mut self,
        line: &Line,
        child: String,
        parent: &str,
    ) -> Result<(), TopologyError> {
        match self.parents.get(&child) {
            Some((other, _)) if other == parent => Ok(()),
            Some((other, at)) => Err(line.error(format!(
                "switch {} already under switch {} (line {at})",
                quote(&child),
                quote(other)
            ))),
            None => {
                self.parents
                    .insert(child, (parent.to_string(), line.number));
                Ok(())
            }
        }
    }

    /// Each node's placement, its spine the parent of its leaf.
    fn finish(self) -> Topology {
        let parents = self.parents;
        let nodes = self
            .nodes
            .into_iter()
            .map(|(node, placed)| {
                let leaf = placed.leaf.map(|(leaf, _)| leaf);
                let spine = leaf
                    .as_ref()
                    .and_then(|leaf| parents.get(leaf))
                    .map(|(spine, _)| spine.clone());
                let block = placed.block.map(|(block, _)| block);
                (node, NodePlacement { leaf, spine, block })
            })
            .collect();
        Topology { nodes }
    }
}

/// Records `name` as defined on `line`; an error when it already was.
fn define(
    defined: &mut HashMap<String, usize>,
    what: &str,
    name: &str,
    line: &Line,
) -> Result<(), TopologyError> {
    if let Some(at) = defined.get(name) {
        return Err(line.error(format!(
            "{what} {} already defined on line {at}",
            quote(name)
        )));
    }
    defined.insert(name.to_string(), line.number);
    Ok(())
}
