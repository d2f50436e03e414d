#!/usr/bin/env python3
"""A DHCPv4 client that writes whatever fields an attacker likes.

rawdhcp.py --iface IF --chaddr MAC [--giaddr A] [--ciaddr A] [--src A]
           [--type discover|request] [--requested A] [--server-id A]
           [--opt CODE:HEX ...] [--dst A] [--wait S]

Sends one message from --src (default 0.0.0.0) port 68 to --dst:67 and
prints every reply for its xid as one JSON line {"type": N, "yiaddr": A}.
"""
import argparse, json, os, select, socket, struct, time

p = argparse.ArgumentParser()
p.add_argument("--iface", required=True)
p.add_argument("--chaddr", required=True)
p.add_argument("--giaddr", default="0.0.0.0")
p.add_argument("--ciaddr", default="0.0.0.0")
p.add_argument("--src", default="0.0.0.0")
p.add_argument("--dst", default="255.255.255.255")
p.add_argument("--type", default="discover")
p.add_argument("--requested")
p.add_argument("--server-id")
p.add_argument("--opt", action="append", default=[])
p.add_argument("--wait", type=float, default=2.0)
a = p.parse_args()

xid = os.urandom(4)
hw = bytes.fromhex(a.chaddr.replace(":", ""))
hdr = struct.pack("!BBBB4sHH4s4s4s4s16s64s128s", 1, 1, 6, 0, xid, 0, 0x8000,
                  socket.inet_aton(a.ciaddr), b"\0" * 4, b"\0" * 4, socket.inet_aton(a.giaddr),
                  hw.ljust(16, b"\0"), b"", b"")
opts = bytes([53, 1, {"discover": 1, "request": 3}[a.type]])
if a.requested:
    opts += bytes([50, 4]) + socket.inet_aton(a.requested)
if a.server_id:
    opts += bytes([54, 4]) + socket.inet_aton(a.server_id)
for o in a.opt:
    code, val = o.split(":", 1)
    v = bytes.fromhex(val)
    opts += bytes([int(code), len(v)]) + v
pkt = hdr + bytes([99, 130, 83, 99]) + opts + b"\xff"

s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BROADCAST, 1)
s.setsockopt(socket.SOL_SOCKET, socket.SO_BINDTODEVICE, a.iface.encode())
s.bind((a.src, 68))
s.sendto(pkt, (a.dst, 67))
end = time.time() + a.wait
while time.time() < end:
    r, _, _ = select.select([s], [], [], max(0, end - time.time()))
    if not r:
        break
    b, _ = s.recvfrom(2048)
    if len(b) < 240 or b[4:8] != xid:
        continue
    t, i = 0, 240
    while i + 1 < len(b) and b[i] != 255:
        if b[i] == 0:
            i += 1
            continue
        if b[i] == 53:
            t = b[i + 2]
        i += 2 + b[i + 1]
    print(json.dumps({"type": t, "yiaddr": socket.inet_ntoa(b[16:20])}), flush=True)
