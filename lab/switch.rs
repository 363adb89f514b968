//! The lab's virtual L2 switch: a learning Ethernet switch over unix datagram sockets.
//!
//! Each lab VM is started with qemu's `-netdev dgram` pointing its local end at
//! `<run>/nodeN.sock` and its remote end at `<run>/switch.sock`, so every datagram is one Ethernet
//! frame. This qemu build has no VDE backend, and the multicast `socket` backend would send to a
//! non-loopback address, so the lab brings its own switch: frames go only between unix sockets.
//! Built with plain `rustc` by `lab/setup` (no dependencies).
//!
//! Usage: lab-switch <switch.sock> <node1.sock> [<node2.sock> ...]
use std::collections::HashMap;
use std::os::unix::net::UnixDatagram;
use std::path::PathBuf;
use std::sync::mpsc::{sync_channel, SyncSender};

/// Frames queued per egress port. When a port's queue is full the frame is dropped, as a
/// switch drops on a congested egress port: a VM that stops reading its socket for a while
/// (its virtio receive ring full under emulation) must not stall the other ports. A single
/// blocking send loop did exactly that: one full receiver blocked the whole switch.
const EGRESS_QUEUE_FRAMES: usize = 512;

fn main() {
    let mut args = std::env::args_os().skip(1).map(PathBuf::from);
    let Some(own) = args.next() else {
        eprintln!("usage: lab-switch <switch.sock> <node.sock>...");
        std::process::exit(2);
    };
    let ports: Vec<PathBuf> = args.collect();
    let _ = std::fs::remove_file(&own);
    let socket = match UnixDatagram::bind(&own) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("lab-switch: cannot bind {}: {e}", own.display());
            std::process::exit(1);
        }
    };
    // One sender thread per port, each with its own handle on the bound socket (frames must
    // come from switch.sock) and a bounded queue.
    let egress: Vec<SyncSender<Vec<u8>>> = ports
        .iter()
        .map(|path| {
            let (tx, rx) = sync_channel::<Vec<u8>>(EGRESS_QUEUE_FRAMES);
            let out = socket.try_clone().unwrap_or_else(|e| {
                eprintln!("lab-switch: cannot clone the socket: {e}");
                std::process::exit(1);
            });
            let path = path.clone();
            std::thread::spawn(move || {
                for frame in rx {
                    // A VM that is down (or not yet up) has no socket: dropping the frame is
                    // what a switch port with no link does.
                    let _ = out.send_to(&frame, &path);
                }
            });
            tx
        })
        .collect();
    // Source MAC -> port index, learned from traffic; unknown and broadcast destinations flood.
    let mut table: HashMap<[u8; 6], usize> = HashMap::new();
    let mut frame = vec![0u8; 65536];
    loop {
        let (len, from) = match socket.recv_from(&mut frame) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("lab-switch: recv: {e}");
                continue;
            }
        };
        if len < 14 {
            continue;
        }
        let Some(ingress) = from
            .as_pathname()
            .and_then(|p| ports.iter().position(|port| port == p))
        else {
            continue;
        };
        let mut src = [0u8; 6];
        src.copy_from_slice(&frame[6..12]);
        table.insert(src, ingress);
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&frame[0..6]);
        let targets: Vec<usize> = match table.get(&dst) {
            Some(&port) if dst[0] & 1 == 0 => vec![port],
            _ => (0..ports.len()).filter(|&p| p != ingress).collect(),
        };
        for port in targets {
            if port != ingress {
                // Full queue: drop (see EGRESS_QUEUE_FRAMES).
                let _ = egress[port].try_send(frame[..len].to_vec());
            }
        }
    }
}
