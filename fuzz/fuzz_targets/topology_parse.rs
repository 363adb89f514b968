//! Fuzz the Slurm topology parser (`src/topology/`): a site's `topology.conf`, or a hostile one,
//! gets placements or an error naming its line, never a panic, and never more memory than its
//! limits allow.
//!
//! Properties (the proptests in `src/topology/tests.rs` check the same, for stable toolchains):
//! * `parse` returns for any text; an error's line lies within the text's lines, and its entry
//!   holds no character unsafe to print;
//! * every placed node has a leaf or a block, and a spine only with a leaf; its labels are the
//!   parts it has, in the order tor, spine, block;
//! * `expand` of any hostlist returns at most the limit it is given, or an error.
//!
//! Seeds: `fuzz/seeds/topology_parse/`, a tree and a block file as Slurm's documentation writes
//! them; `scripts/fuzz topology_parse 600` passes them, with the dictionary.
#![no_main]

use libfuzzer_sys::fuzz_target;
use rdma_probe_exporter::text::is_unsafe_char;
use rdma_probe_exporter::topology::{expand, parse};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    match parse(&text) {
        Ok(topology) => {
            for (node, placement) in topology.nodes() {
                assert!(
                    placement.leaf.is_some() || placement.block.is_some(),
                    "{node}"
                );
                assert!(
                    placement.spine.is_none() || placement.leaf.is_some(),
                    "{node}"
                );
                let names: Vec<&str> = topology.labels(node).iter().map(|(n, _)| *n).collect();
                let want: Vec<&str> = [
                    placement.leaf.as_ref().map(|_| "tor"),
                    placement.spine.as_ref().map(|_| "spine"),
                    placement.block.as_ref().map(|_| "block"),
                ]
                .into_iter()
                .flatten()
                .collect();
                assert_eq!(names, want, "{node}");
            }
        }
        Err(e) => {
            let lines = text.split('\n').count().max(1);
            assert!(e.line >= 1 && e.line <= lines, "line {} of {lines}", e.line);
            assert!(!e.entry.chars().any(is_unsafe_char), "{:?}", e.entry);
        }
    }
    if let Ok(names) = expand(&text, 1000) {
        assert!(names.len() <= 1000);
    }
});
