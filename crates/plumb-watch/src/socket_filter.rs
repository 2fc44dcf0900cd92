//! The scout's classic BPF socket filter: the kernel hands the scout every NEWGEN
//! and one other datagram in [`SCOUT_SAMPLE_ONE_IN`], chosen at random, and drops the
//! rest before they are queued. The scout copies only the first [`SCOUT_HEAD`] bytes
//! of each (its receive slots are that size).
//!
//! The filter keeps sampled datagrams whole rather than cutting them to their head
//! (which a classic BPF program can do by returning a length): the kernel trims the
//! buffer it is broadcasting in place, and when it then fails to queue it on the scout
//! (its buffer full) it hands the same trimmed buffer to the next subscriber. The
//! listener then got datagrams cut to 512 bytes with no sign of it (seen on 6.18:
//! `do_one_broadcast` keeps its copy after a failed delivery), and lost notifications
//! without a gap.
//!
//! Why: the kernel sends a transaction's NEWGEN (which names the writer) after all of
//! its notifications, ~130 ms after the first one for a 10k-service revert on a 2-core
//! VM (measured with a socket that takes nothing but NEWGEN). A scout that copies
//! every datagram falls behind during kube-proxy's 300k-notification syncs and then
//! meets the revert's NEWGEN late; a scout that the kernel feeds one datagram in eight
//! stays level with the kernel, so it reads NEWGEN as it is sent, costs an eighth of
//! the CPU and queues an eighth of the memory. The sample is still large for the
//! transactions it matters for (a 10k-service revert is ~14k datagrams).
//!
//! The program reads the first message's `nlmsg_type` (classic BPF loads are big
//! endian, netlink is host order: the constant is byte-swapped to match) and the
//! kernel's random number (`SKF_AD_RANDOM`). [`run`] interprets it for the tests.

use std::io;
use std::os::fd::RawFd;

/// The scout takes one datagram in this many (besides every NEWGEN). A power of two.
pub const SCOUT_SAMPLE_ONE_IN: u32 = 8;

/// Bytes kept of each sampled datagram: a NEWGEN message is ~60 bytes, and table and
/// chain names come first in every notification.
pub const SCOUT_HEAD: u32 = 512;

/// `(NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWGEN`.
const NEWGEN: u16 = (10 << 8) | 15;

// Classic BPF opcodes (linux/filter.h).
const LD_H_ABS: u16 = 0x28;
const LD_W_ABS: u16 = 0x20;
const ALU_AND_K: u16 = 0x54;
const JMP_JEQ_K: u16 = 0x15;
const RET_K: u16 = 0x06;
/// `SKF_AD_OFF + SKF_AD_RANDOM`: a load from here yields a random u32.
const AD_RANDOM: u32 = (-0x1000i32) as u32 + 56;

/// One classic BPF instruction (`struct sock_filter`).
pub type Insn = libc::sock_filter;

fn insn(code: u16, jt: u8, jf: u8, k: u32) -> Insn {
    libc::sock_filter { code, jt, jf, k }
}

/// The program: NEWGEN, and one other datagram in `one_in` (rounded up to a power of
/// two), whole; else nothing.
pub fn scout_program(one_in: u32) -> [Insn; 7] {
    let mask = one_in.max(1).next_power_of_two() - 1;
    let newgen_as_loaded = u16::from_be_bytes(NEWGEN.to_ne_bytes());
    [
        insn(LD_H_ABS, 0, 0, 4),                            // 0: A = nlmsg_type
        insn(JMP_JEQ_K, 3, 0, u32::from(newgen_as_loaded)), // 1: NEWGEN? -> 5
        insn(LD_W_ABS, 0, 0, AD_RANDOM),                    // 2: A = random
        insn(ALU_AND_K, 0, 0, mask),                        // 3: A &= mask
        insn(JMP_JEQ_K, 0, 1, 0),                           // 4: A == 0? -> 5 : 6
        insn(RET_K, 0, 0, u32::MAX),                        // 5: the whole datagram
        insn(RET_K, 0, 0, 0),                               // 6: drop
    ]
}

/// Attaches `program` to the socket (`SO_ATTACH_FILTER`; the kernel copies it).
pub fn attach(fd: RawFd, program: &[Insn]) -> io::Result<()> {
    let prog = libc::sock_fprog {
        len: program.len() as u16,
        filter: program.as_ptr().cast_mut(),
    };
    crate::nft_events::set_socket_option(fd, libc::SO_ATTACH_FILTER, &prog)
}

/// Interprets the subset of classic BPF that [`scout_program`] uses, as the kernel
/// would on `packet` with `random` as the kernel's random number. None on anything
/// else (an unknown opcode, a load past the end, a jump out of the program).
pub fn run(program: &[Insn], packet: &[u8], random: u32) -> Option<u32> {
    let mut a = 0u32;
    let mut pc = 0usize;
    loop {
        let i = program.get(pc)?;
        pc += 1;
        match i.code {
            LD_H_ABS => {
                let k = i.k as usize;
                a = u32::from(u16::from_be_bytes([*packet.get(k)?, *packet.get(k + 1)?]));
            }
            LD_W_ABS if i.k == AD_RANDOM => a = random,
            ALU_AND_K => a &= i.k,
            JMP_JEQ_K => pc += usize::from(if a == i.k { i.jt } else { i.jf }),
            RET_K => return Some(i.k),
            _ => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(kind: u16) -> Vec<u8> {
        let mut m = 20u32.to_ne_bytes().to_vec();
        m.extend(kind.to_ne_bytes());
        m.extend([0u8; 14]);
        m
    }

    #[test]
    fn newgen_always_passes_and_other_datagrams_one_in_eight_all_whole() {
        let p = scout_program(SCOUT_SAMPLE_ONE_IN);
        let newgen = message(NEWGEN);
        for r in [0, 1, 7, 8, u32::MAX] {
            assert_eq!(run(&p, &newgen, r), Some(u32::MAX), "random {r}");
        }
        // NEWCHAIN and DELRULE: kept when the random number's low bits are zero.
        for kind in [(10 << 8) | 3, (10 << 8) | 8] {
            let m = message(kind);
            let kept = (0..64u32)
                .filter(|r| run(&p, &m, *r) == Some(u32::MAX))
                .count();
            let dropped = (0..64u32).filter(|r| run(&p, &m, *r) == Some(0)).count();
            assert_eq!((kept, dropped), (8, 56));
        }
        // A type whose bytes are NEWGEN's swapped is not NEWGEN.
        let swapped = message(NEWGEN.swap_bytes());
        assert_eq!(run(&p, &swapped, 1), Some(0));
        // A datagram too short to hold a type: the kernel drops it (load out of range).
        assert_eq!(run(&p, &[0u8; 5], 0), None);
        // Sampling rounds up to a power of two; 1 keeps everything.
        assert_eq!(scout_program(6)[3].k, 7);
        let all = scout_program(1);
        assert!((0..16).all(|r| run(&all, &message(3), r) == Some(u32::MAX)));
        // Never a length between: a cut would trim the kernel's shared buffer.
        assert!(
            p.iter()
                .filter(|i| i.code == RET_K)
                .all(|i| i.k == 0 || i.k == u32::MAX)
        );
    }
}
