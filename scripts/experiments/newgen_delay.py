#!/usr/bin/env python3
# When does the kernel send an nf_tables transaction's NEWGEN, relative to its first
# notification? Run as root inside a network namespace that holds a big ruleset:
#   ip netns exec NS scripts/experiments/newgen_delay.py "iptables-nft-restore < revert.txt"
# Two subscriptions: one reads every datagram, the other has a classic BPF socket filter
# that passes nothing but NEWGEN (so it never has a backlog). Both print milliseconds
# since the command started. If both see NEWGEN at the same time, long after the first
# notification, the delay is the kernel's, not the reader's (docs/benchmarks.md,
# plumb watch).
import ctypes, os, socket, struct, sys, threading, time

NETLINK_NETFILTER, NFNLGRP_NFTABLES, SOL_NETLINK = 12, 7, 270
SO_RCVBUFFORCE, SO_ATTACH_FILTER, NETLINK_ADD_MEMBERSHIP = 33, 26, 1
NEWGEN = (10 << 8) | 15
KEEP = []

def subscribe(only_newgen):
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    s.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 256 << 20)
    s.bind((0, 0))
    s.setsockopt(SOL_NETLINK, NETLINK_ADD_MEMBERSHIP, NFNLGRP_NFTABLES)
    if only_newgen:
        loaded = struct.unpack('>H', struct.pack('=H', NEWGEN))[0]
        prog = [(0x28, 0, 0, 4), (0x15, 0, 1, loaded), (0x06, 0, 0, 0xffffffff), (0x06, 0, 0, 0)]
        buf = ctypes.create_string_buffer(b''.join(struct.pack('HBBI', *i) for i in prog))
        KEEP.append(buf)
        s.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, struct.pack('HL', len(prog), ctypes.addressof(buf)))
    s.settimeout(30)
    return s

every, newgen_only = subscribe(False), subscribe(True)
seen = {}

def read_every():
    every.recv(1 << 16)
    seen['first notification'] = time.monotonic()
    n = 1
    while True:
        d = every.recv(1 << 16)
        n += 1
        off = 0
        while off + 16 <= len(d):
            length, kind = struct.unpack_from('=IH', d, off)
            if kind == NEWGEN:
                seen['NEWGEN (reader of every datagram)'] = time.monotonic()
                seen['datagrams'] = n
                return
            if length < 16:
                break
            off += (length + 3) & ~3

def read_newgen_only():
    newgen_only.recv(1 << 16)
    seen['NEWGEN (NEWGEN-only socket)'] = time.monotonic()

threads = [threading.Thread(target=read_every), threading.Thread(target=read_newgen_only)]
for t in threads:
    t.start()
time.sleep(0.3)
t0 = time.monotonic()
os.system(sys.argv[1])
end = time.monotonic()
for t in threads:
    t.join()
for k, v in seen.items():
    print(f"{k}: {round((v - t0) * 1000, 1) if isinstance(v, float) else v}")
print(f"command ended: {round((end - t0) * 1000, 1)}")
