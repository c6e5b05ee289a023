#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""Writes the seed corpus of the fuzz targets (tests/fuzz/corpus/<target>/seed-*): a few
small valid and near-valid inputs per target, in the formats the fuzz_<target>.c comments
describe. Deterministic; rerun after a format change. Files named crash-* (inputs that once
crashed a target) are never touched."""
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
KEY = b"papccl-fuzz-key!"
AF_INET, AF_INET6 = 2, 10


def sockaddr_in(ip, port):
    b = struct.pack("<H", AF_INET) + struct.pack(">H", port) + bytes(ip) + bytes(8)
    return b.ljust(32, b"\0")


def sockaddr_in6(port):
    b = struct.pack("<H", AF_INET6) + struct.pack(">H", port) + bytes(4)
    b += bytes(15) + b"\x01" + bytes(4)  # ::1, scope 0
    return b.ljust(32, b"\0")


def bs_hdr(type_, length, seq=0, step=0, key=KEY, magic=0x50415042, version=1):
    return struct.pack(">IHHIIQ", magic, version, type_, seq, step, length) + key


def root_hello(rank, nranks, addr, **kw):
    return bs_hdr(1, 40, **kw) + struct.pack(">II", rank, nranks) + addr


def seeds():
    a0, a1, a2 = sockaddr_in([127, 0, 0, 1], 4000), sockaddr_in([10, 0, 0, 2], 4001), sockaddr_in6(4002)
    c = {}
    # bootstrap_msg: mode 0 root hellos, 1 root reply, 2 ring message.
    c["bootstrap_msg"] = {
        "hellos-3-ranks": b"\0" + root_hello(0, 3, a0) + root_hello(2, 3, a2) + root_hello(1, 3, a1),
        "hellos-duplicate-rank": b"\0" + root_hello(1, 2, a0) + root_hello(1, 2, a1) + root_hello(0, 2, a0),
        "hellos-nranks-disagree": b"\0" + root_hello(0, 2, a0) + root_hello(1, 3, a1),
        "hello-bad-key": b"\0" + root_hello(0, 1, a0, key=b"x" * 16),
        "hello-bad-addr": b"\0" + root_hello(0, 1, bytes(32)),
        "hello-rank-range": b"\0" + root_hello(5, 4, a0),
        "reply-3-ranks": b"\1" + bytes([2, 1]) + bs_hdr(2, 16 + 3 * 32) + b"K" * 16 + a0 + a1 + a2,
        "reply-short-len": b"\1" + bytes([1, 0]) + bs_hdr(2, 16) + b"K" * 16 + a0,
        "ring-hello": b"\2" + bytes([3]) + struct.pack(">I", 8) + bs_hdr(3, 8) + struct.pack(">II", 1, 2),
        "ring-allgather-big": b"\2" + bytes([4]) + struct.pack(">I", 1 << 20) + bs_hdr(4, 1 << 20),
        "ring-bad-version": b"\2" + bytes([5]) + struct.pack(">I", 0) + bs_hdr(5, 0, version=2),
    }
    # unique_id: 128 bytes: magic, version, flags (network order), key, root address.
    def uid(addr, version=1, flags=0, magic=b"papcclID"):
        return (magic + struct.pack(">II", version, flags) + KEY + addr).ljust(128, b"\0")
    c["unique_id"] = {
        "ipv4": uid(a0),
        "ipv6-rank0-serves": uid(a2, flags=1),
        "bad-magic": uid(a0, magic=b"ncclID\0\0"),
        "bad-version": uid(a0, version=7),
        "port-zero": uid(sockaddr_in([127, 0, 0, 1], 0)),
        "family-unknown": uid(b"\x01\x00" + bytes(30)),
        "short": uid(a0)[:20],
    }
    # shm_segment: mode 0 handle, 1 header.
    def shm_hdr(nranks, owner, magic=0x70617073686D3031, version=2):
        return struct.pack("<QIIIIQQiI", magic, version, nranks, 65536, 8, 1 << 20, 3 << 20, owner, 0)
    c["shm_segment"] = {
        "handle-valid": b"\0" + b"/papccl-00112233445566778899aabbccddeeff-1234-1".ljust(128, b"\0"),
        "handle-unterminated": b"\0" + b"/papccl-" + b"a" * 120,
        "handle-other-prefix": b"\0" + b"/dev-shm-other\0",
        "handle-slash": b"\0" + b"/papccl-../etc\0",
        "header-valid": b"\1" + bytes([3, 1]) + shm_hdr(4, 1),
        "header-wrong-owner": b"\1" + bytes([3, 1]) + shm_hdr(4, 2),
        "header-bad-version": b"\1" + bytes([1, 0]) + shm_hdr(2, 0, version=1),
    }
    # shm_fifo: nslots-1, slotSize-1, head; nslots records; receives (tag, total u16, flags).
    def meta(tag, n):
        return struct.pack("<QII", tag, n, 0)
    def recv(tag, total, sink=0):
        return bytes([tag]) + struct.pack("<H", total) + bytes([sink])
    c["shm_fifo"] = {
        "two-messages": bytes([3, 15, 4]) + meta(1, 16) + meta(1, 4) + meta(2, 0) + meta(3, 16)
        + recv(1, 20) + recv(2, 0) + recv(3, 16, 1),
        "zero-byte": bytes([0, 7, 1]) + meta(9, 0) + recv(9, 0),
        "tag-mismatch": bytes([1, 31, 2]) + meta(5, 8) + meta(6, 8) + recv(6, 8),
        "longer-than-recv": bytes([1, 31, 1]) + meta(5, 32) + meta(5, 8) + recv(5, 8),
        "wraps": bytes([1, 7, 7]) + meta(1, 8) + meta(1, 8) + recv(1, 24, 1) + recv(1, 16),
    }
    # ib_handle: mode, expected rank, nranks; handle (little-endian, see ib_parts.h).
    def ib(rank, nranks, qpns, length=None, version=1):
        n = 72 + 3 * nranks
        h = struct.pack("<QHBBIIHBB", 0x3130626970617070, version, 2, 5, rank, nranks, 7, 1, 0)
        h += bytes(range(16)) + struct.pack("<QIIIIII", 0x7F0000001000, 0x1234, length or n, 0, 16384, 8, 0)
        for q in qpns:
            h += struct.pack("<I", q)[:3]
        return h
    c["ib_handle"] = {
        "valid-2-ranks": bytes([3, 0, 0]) + ib(1, 2, [0x11, 0x22]),
        "valid-4-ranks": bytes([3, 0, 0]) + ib(0, 4, [1, 2, 3, 0xFFFFFF]),
        "bad-sum": bytes([0, 1, 2]) + ib(1, 2, [0x11, 0x22]),
        "bad-length": bytes([3, 0, 0]) + ib(0, 3, [1, 2, 3], length=500),
        "truncated": bytes([3, 0, 0]) + ib(0, 8, list(range(8)))[:90],
        "bad-version": bytes([3, 0, 0]) + ib(0, 1, [5], version=2),
    }
    # ucx_handle: magic, board address, address length, key length (host order), then both.
    def ucx(addr_len, rkey_len, magic=0x7061707563783031, total=None):
        h = struct.pack("<QQII", magic, 0x7F00DEAD0000, addr_len, rkey_len)
        body = bytes((i * 13) & 0xFF for i in range(addr_len + rkey_len))
        return (h + body)[: total if total is not None else None]
    c["ucx_handle"] = {
        "rank0": ucx(64, 32),
        "no-key": ucx(100, 0),
        "too-long": ucx(4000, 200)[:300],
        "bad-magic": ucx(8, 0, magic=1),
        "short-header": ucx(0, 0)[:10],
    }
    # arrival_trace: mode 0 option text, 1 trace file contents.
    c["arrival_trace"] = {
        "text-late": b"\0late:3",
        "text-late-k": b"\0late-k:2",
        "text-staircase": b"\0staircase",
        "text-normal": b"\0normal",
        "text-bad": b"\0late:-1",
        "trace-2x3": b"\1# rank offsets in us\n0 10 20\n5, 0, 1.5\n",
        "trace-ragged": b"\1" + b"1 2\n3\n",
        "trace-comment-only": b"\1" + b"# nothing\n\n",
        "trace-negative": b"\1" + b"0 -1\n",
        "trace-no-newline": b"\1" + b"1e3 2e3 nan",
        "trace-crlf": b"\1" + b"1\t2\r\n3\t4\r\n",
    }
    # param: kind (0 int, 1 string, 2 PAPCCL_DEBUG_SUBSYS, 3 PAPCCL_FAULT, 4 bare parser),
    # variable (or range) byte, value.
    c["param"] = {
        "int-timeout-ok": b"\x00\x00600",
        "int-spin-hex": b"\x00\x010x20",
        "int-chunk-junk": b"\x00\x0212k",
        "int-slot-overflow": b"\x00\x0399999999999999999999",
        "int-nslots-neg": b"\x00\x04-5",
        "int-gid-octal": b"\x00\x15 017",
        "str-algo": b"\x01\x00ring",
        "str-commid": b"\x01\x01127.0.0.1:29500",
        "subsys": b"\x02\x00^INIT,BOOTSTRAP,all",
        "fault": b"\x03\x00kill@bootstrap:rank=1:nth=2",
        "fault-bad": b"\x03\x00delay@chunk:ms=:rank=",
        "parse-range": b"\x04\x93-0x7f",
    }
    return c


def main():
    for target, files in seeds().items():
        d = os.path.join(HERE, "corpus", target)
        os.makedirs(d, exist_ok=True)
        for name in os.listdir(d):
            if name.startswith("seed-"):
                os.remove(os.path.join(d, name))
        for name, data in files.items():
            with open(os.path.join(d, "seed-" + name), "wb") as f:
                f.write(data)
    return 0


if __name__ == "__main__":
    sys.exit(main())
