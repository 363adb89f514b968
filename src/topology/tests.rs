//! `topology.conf` as Slurm documents it, at cluster scale, every refusal, and arbitrary input.

use std::time::{Duration, Instant};

use proptest::prelude::*;

use super::slurm::{MAX_LINES, MAX_LINE_BYTES, MAX_NAMES};
use super::*;

fn topology(text: &str) -> Topology {
    parse(text).unwrap_or_else(|e| panic!("{e}"))
}

fn error(text: &str) -> TopologyError {
    match parse(text) {
        Ok(topology) => panic!("accepted: {topology:?}"),
        Err(e) => e,
    }
}

/// Asserts `text` fails on `line` with a message containing `message`.
fn assert_error(text: &str, line: usize, message: &str) -> TopologyError {
    let e = error(text);
    assert_eq!(e.line, line, "{e}");
    assert!(e.message.contains(message), "{e}\nexpected: {message}");
    e
}

fn placement(leaf: Option<&str>, spine: Option<&str>, block: Option<&str>) -> NodePlacement {
    NodePlacement {
        leaf: leaf.map(str::to_string),
        spine: spine.map(str::to_string),
        block: block.map(str::to_string),
    }
}

/// The tree plugin's example in Slurm's topology.conf(5).
const SLURM_TREE_EXAMPLE: &str = "\
##################################################################
# Slurm's network topology configuration file for use with the
# topology/tree plugin
##################################################################
SwitchName=s0 Nodes=dev[0-5]
SwitchName=s1 Nodes=dev[6-11]
SwitchName=s2 Nodes=dev[12-17]
SwitchName=s3 Switches=s[0-2]
";

/// The block plugin's example in Slurm's topology.conf(5).
const SLURM_BLOCK_EXAMPLE: &str = "\
##################################################################
# Slurm's network topology configuration file for use with the
# topology/block plugin
##################################################################
BlockName=block1 Nodes=node[01-04]
BlockName=block2 Nodes=node[05-08]
BlockName=block3 Nodes=node[09-12]
BlockName=block4 Nodes=node[13-16]
BlockSizes=4,16
";

#[test]
fn slurm_tree_example() {
    let t = topology(SLURM_TREE_EXAMPLE);
    assert_eq!(t.len(), 18);
    for n in 0..18 {
        let leaf = format!("s{}", n / 6);
        assert_eq!(
            t.placement(&format!("dev{n}")),
            Some(&placement(Some(&leaf), Some("s3"), None)),
            "dev{n}"
        );
    }
    assert_eq!(t.placement("dev18"), None);
    assert_eq!(t.placement("s0"), None, "switches are not nodes");
    assert_eq!(
        t.labels("dev7"),
        [("tor", "s1".to_string()), ("spine", "s3".to_string())]
    );
}

#[test]
fn slurm_block_example() {
    let t = topology(SLURM_BLOCK_EXAMPLE);
    assert_eq!(t.len(), 16);
    for n in 1..=16 {
        let block = format!("block{}", (n - 1) / 4 + 1);
        assert_eq!(
            t.placement(&format!("node{n:02}")),
            Some(&placement(None, None, Some(&block))),
            "node{n:02}"
        );
    }
    assert_eq!(t.labels("node16"), [("block", "block4".to_string())]);
}

#[test]
fn an_empty_file_names_no_node() {
    for text in ["", "\n\n", "# only a comment\n   \n", "BlockSizes=4,16"] {
        let t = topology(text);
        assert_eq!(t.len(), 0);
        assert!(t.is_empty() && t.nodes().next().is_none());
    }
    assert!(topology("").labels("n1").is_empty());
}

#[test]
fn keys_are_case_insensitive_and_other_keys_ignored() {
    let t = topology(
        "switchname=leaf0 NODES=a[1-2] LinkSpeed=100\n\
         SWITCHNAME=spine switches=leaf0 linkspeed=400 Comment=x\n",
    );
    assert_eq!(
        t.placement("a2"),
        Some(&placement(Some("leaf0"), Some("spine"), None))
    );
}

#[test]
fn comments_blank_lines_and_continuations() {
    let t = topology(
        "  # leaves\n\
         \n\
         SwitchName=leaf0 \\\n\
         \tNodes=gpu[01-02],\\   \n\
         gpu05 # the last one\n\
         \r\n\
         SwitchName=spine0 Switches=leaf0 # spine\r\n\
         SwitchName=leaf1 Nodes=x \\\n",
    );
    let names: Vec<&str> = t.nodes().map(|(name, _)| name).collect();
    assert_eq!(names, ["gpu01", "gpu02", "gpu05", "x"]);
    assert_eq!(
        t.placement("gpu05"),
        Some(&placement(Some("leaf0"), Some("spine0"), None))
    );
    assert_eq!(
        t.placement("x"),
        Some(&placement(Some("leaf1"), None, None))
    );
}

#[test]
fn a_switch_with_nodes_and_switches_is_their_leaf_and_parent() {
    let t = topology(
        "SwitchName=top Nodes=head Switches=leaf0\n\
         SwitchName=leaf0 Nodes=n1\n",
    );
    assert_eq!(
        t.placement("head"),
        Some(&placement(Some("top"), None, None))
    );
    assert_eq!(
        t.placement("n1"),
        Some(&placement(Some("leaf0"), Some("top"), None))
    );
}

#[test]
fn parents_may_come_first_and_children_may_be_undefined() {
    let t = topology(
        "SwitchName=spine Switches=leaf[0-3],ghost\n\
         SwitchName=leaf2 Nodes=n[1-2]\n",
    );
    assert_eq!(
        t.placement("n1"),
        Some(&placement(Some("leaf2"), Some("spine"), None))
    );
    assert_eq!(t.len(), 2);
}

#[test]
fn a_node_in_a_tree_and_a_block_has_both() {
    let t = topology(
        "SwitchName=leaf0 Nodes=n[1-2],n1\n\
         SwitchName=spine Switches=leaf0,leaf0\n\
         BlockName=b0 Nodes=n1\n",
    );
    assert_eq!(
        t.labels("n1"),
        [
            ("tor", "leaf0".to_string()),
            ("spine", "spine".to_string()),
            ("block", "b0".to_string())
        ]
    );
    assert_eq!(
        t.labels("n2"),
        [("tor", "leaf0".to_string()), ("spine", "spine".to_string())]
    );
}

/// 2,000 nodes `gpu0000`..`gpu1999`, 32 a leaf (63 leaves, the last half full), 16 leaves a
/// spine (4 spines).
fn generated_tree() -> String {
    let mut text = String::from("# generated\n");
    for leaf in 0..63 {
        let first = leaf * 32;
        let last = (first + 31).min(1999);
        text +=
            &format!("SwitchName=leaf{leaf:02} Nodes=gpu[{first:04}-{last:04}] LinkSpeed=400\n");
    }
    for spine in 0..4 {
        let first = spine * 16;
        let last = (first + 15).min(62);
        text += &format!("SwitchName=spine{spine} Switches=leaf[{first:02}-{last:02}]\n");
    }
    text
}

#[test]
fn a_generated_2000_node_tree() {
    let text = generated_tree();
    let started = Instant::now();
    let t = topology(&text);
    let took = started.elapsed();
    println!("parsed 2,000 nodes, 63 leaves, 4 spines in {took:?}");
    let limit = if cfg!(debug_assertions) {
        Duration::from_secs(5)
    } else {
        Duration::from_secs(1)
    };
    assert!(took < limit, "{took:?}");
    assert_eq!(t.len(), 2000);
    for n in 0..2000 {
        let leaf = format!("leaf{:02}", n / 32);
        let spine = format!("spine{}", n / 32 / 16);
        assert_eq!(
            t.placement(&format!("gpu{n:04}")),
            Some(&placement(Some(&leaf), Some(&spine), None)),
            "gpu{n:04}"
        );
    }
}

#[test]
fn the_error_names_line_entry_and_problem() {
    let text = "# comment\n".repeat(11) + "SwitchName=leaf07 Nodes=gpu[02-\n";
    let e = assert_error(&text, 12, "unbalanced bracket");
    assert_eq!(e.entry, "SwitchName=leaf07 Nodes=gpu[02-");
    assert_eq!(
        e.to_string(),
        r#"line 12: SwitchName=leaf07 Nodes=gpu[02-: unbalanced bracket in "gpu[02-""#
    );
}

#[test]
fn hostlist_errors_are_line_errors() {
    assert_error("SwitchName=s Nodes=n[5-3]", 1, "range start greater");
    assert_error("\nSwitchName=s Switches=l[a-b]", 2, "non-numeric");
    assert_error("BlockName=b Nodes=n[1[2]]", 1, "nested bracket");
    assert_error("BlockName=b Nodes=a,,b", 1, "empty item");
    assert_error("SwitchName=s Nodes=", 1, "empty Nodes=");
    assert_error("SwitchName=s Switches=", 1, "empty Switches=");
}

#[test]
fn the_first_key_must_start_an_entry() {
    assert_error("NodeName=n1 Nodes=n1", 1, r#"unknown key "NodeName""#);
    assert_error("\n\nNodes=n1 SwitchName=s", 3, r#"unknown key "Nodes""#);
    assert_error("SwitchName=s Nodes=n BlockName=b", 1, "BlockName after");
    assert_error("SwitchName=s Nodes=a Nodes=b", 1, "Nodes given twice");
    assert_error(
        "SwitchName=s Nodes=a b",
        1,
        r#"expected key=value, found "b""#,
    );
    assert_error("SwitchName=s =x", 1, "expected key=value");
}

#[test]
fn a_switch_needs_members_and_a_block_its_nodes() {
    assert_error(
        "SwitchName=s0 Nodes=a\nSwitchName=s1 LinkSpeed=1",
        2,
        r#"switch "s1" has neither Nodes= nor Switches="#,
    );
    assert_error("BlockName=b Switches=s0", 1, r#"block "b" has no Nodes="#);
}

#[test]
fn names_must_be_plain() {
    assert_error("SwitchName= Nodes=a", 1, "empty switch name");
    assert_error("BlockName= Nodes=a", 1, "empty block name");
    assert_error("SwitchName=\"s0\" Nodes=a", 1, "not allowed in switch name");
    assert_error("SwitchName=s=0 Nodes=a", 1, "'=' not allowed");
    assert_error("SwitchName=s[0-1] Nodes=a", 1, "one name, not a hostlist");
    assert_error("SwitchName=s Nodes=a'b", 1, "not allowed in a name");
    let e = assert_error("SwitchName=s\u{1b}[2J Nodes=a", 1, "not allowed");
    assert!(!e.to_string().contains('\u{1b}'), "{e}");
    assert!(e.entry.contains(r"\u{1b}"), "{}", e.entry);
}

#[test]
fn a_node_is_under_one_leaf_and_in_one_block() {
    assert_error(
        "SwitchName=s0 Nodes=n[1-4]\n# gap\nSwitchName=s1 Nodes=n[4-6]",
        3,
        r#"node "n4" already under switch "s0" (line 1)"#,
    );
    assert_error(
        "BlockName=b0 Nodes=n[1-4]\nBlockName=b1 Nodes=n3",
        2,
        r#"node "n3" already in block "b0" (line 1)"#,
    );
}

#[test]
fn a_switch_has_one_parent() {
    assert_error(
        "SwitchName=p0 Switches=l[0-2]\nSwitchName=p1 Switches=l2",
        2,
        r#"switch "l2" already under switch "p0" (line 1)"#,
    );
}

#[test]
fn a_switch_or_block_is_defined_once() {
    assert_error(
        "SwitchName=s0 Nodes=a\nSwitchName=s0 Nodes=b",
        2,
        r#"switch "s0" already defined on line 1"#,
    );
    assert_error(
        "BlockName=b0 Nodes=a\nBlockName=b0 Nodes=b",
        2,
        r#"block "b0" already defined on line 1"#,
    );
}

#[test]
fn a_continued_line_fails_on_its_first_line() {
    let e = assert_error("\nSwitchName=s0 \\\nNodes=n[1-\\\n", 2, "unbalanced");
    assert_eq!(e.entry, "SwitchName=s0 Nodes=n[1-");
}

#[test]
fn the_names_in_a_file_are_capped_before_they_are_made() {
    let started = Instant::now();
    assert_error(
        "SwitchName=s Nodes=n[0-999999999999]",
        1,
        &format!("more than {MAX_NAMES}"),
    );
    assert!(started.elapsed() < Duration::from_secs(1));
    let half = MAX_NAMES / 2;
    let text = format!(
        "SwitchName=a Nodes=a[0-{}]\nBlockName=b Nodes=b[0-{half}]",
        half - 1
    );
    assert_error(&text, 2, &format!("more than {MAX_NAMES}"));
}

#[test]
fn lines_are_capped_in_number_and_length() {
    let many = "\n".repeat(MAX_LINES) + "BlockSizes=4";
    let e = assert_error(&many, MAX_LINES + 1, "more than 100000 lines");
    assert_eq!(e.entry, "BlockSizes=4");
    let long = format!("SwitchName=s Nodes=n{}", "1".repeat(MAX_LINE_BYTES));
    let e = assert_error(&long, 1, "line longer than 65536 bytes");
    assert_eq!(e.entry.chars().count(), 200);
    assert!(e.entry.ends_with("..."));
    let long_comment = format!("# {}", "x".repeat(MAX_LINE_BYTES));
    assert_error(&long_comment, 1, "line longer");
    let continued = format!(
        "SwitchName=s \\\n{}\\\n{}",
        "x".repeat(40_000),
        "y".repeat(40_000)
    );
    assert_error(&continued, 1, "line longer");
}

/// Text that looks like a topology.conf often enough to reach every branch.
fn conf_like() -> impl Strategy<Value = String> {
    let token = prop_oneof![
        Just("SwitchName=".to_string()),
        Just("BlockName=".to_string()),
        Just("Nodes=".to_string()),
        Just("Switches=".to_string()),
        Just("BlockSizes=".to_string()),
        "[a-c]{0,2}\\[[0-9,\\-\\[\\]]{0,8}\\]?".prop_map(|s| s),
        "[ \n\t#\\\\=,\\[\\]\\-0-9a-c\"\u{1b}]{0,6}".prop_map(|s| s),
    ];
    prop::collection::vec(token, 0..24).prop_map(|tokens| tokens.concat())
}

/// A name as [`expand`] gives it back unchanged: no brackets, commas or forbidden characters.
fn plain_name() -> impl Strategy<Value = String> {
    "[a-zA-Z0-9_.:-]{1,16}"
}

proptest! {
    #[test]
    fn arbitrary_text_never_panics(text in any::<String>()) {
        let _ = parse(&text);
        let _ = expand(&text, 1000);
    }

    #[test]
    fn conf_like_text_never_panics(text in conf_like()) {
        let _ = parse(&text);
        let _ = expand(&text, 1000);
    }

    #[test]
    fn a_comma_list_expands_to_itself(names in prop::collection::vec(plain_name(), 1..40)) {
        prop_assert_eq!(expand(&names.join(","), names.len()), Ok(names.clone()));
    }

    /// Nodes written under random leaves, leaves under random spines: each node reads back with
    /// its leaf and spine.
    #[test]
    fn a_written_tree_reads_back(
        leaves in prop::collection::vec(0usize..4, 1..60),
        spines in prop::collection::vec(0usize..2, 4),
    ) {
        let mut text = String::new();
        for leaf in 0..4 {
            let nodes: Vec<String> = leaves
                .iter()
                .enumerate()
                .filter(|&(_, &l)| l == leaf)
                .map(|(n, _)| format!("n{n:03}"))
                .collect();
            if !nodes.is_empty() {
                text += &format!("SwitchName=leaf{leaf} Nodes={}\n", nodes.join(","));
            }
        }
        for spine in 0..2 {
            let below: Vec<String> = (0..4)
                .filter(|&leaf| spines[leaf] == spine)
                .map(|leaf| format!("leaf{leaf}"))
                .collect();
            if !below.is_empty() {
                text += &format!("SwitchName=spine{spine} Switches={}\n", below.join(","));
            }
        }
        let t = parse(&text).map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert_eq!(t.len(), leaves.len());
        for (n, leaf) in leaves.iter().enumerate() {
            let expected = placement(
                Some(&format!("leaf{leaf}")),
                Some(&format!("spine{}", spines[*leaf])),
                None,
            );
            prop_assert_eq!(t.placement(&format!("n{n:03}")), Some(&expected));
        }
    }
}
