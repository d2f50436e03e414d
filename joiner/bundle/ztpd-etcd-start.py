#!/usr/bin/env python3
"""ztpd etcd member start.

Starts this node's etcd member of its Kubernetes cluster's external etcd,
from /etc/ztpd/etcd-member.json ({"name", "addr", "new", "join_endpoints",
"data_dir"}) and the certificates under /etc/kubernetes/pki/etcd (the keys
server.key and peer.key were made on this node; ztpd signed their
requests). Clients and peers are served on TLS and must present a
certificate of the cluster's etcd CA.

  a data directory with a member in it: etcd starts as it was (a restart).
  "new": the first member starts a new etcd cluster of itself.
  otherwise: the member adds itself through a member that answers (etcd's
  member add on its v3 JSON gateway, with this member's peer certificate
  as its client certificate), then starts with initial-cluster-state
  existing and the cluster etcd answered. A member already added (a
  restart before its first start finished) finds itself in the member
  list instead.

The script then execs etcd (the unit's process: systemd sees etcd's
readiness). ZTPD_ROOT prefixes every path read (for tests), ZTPD_ETCD_BIN
names the etcd binary (default /usr/local/bin/etcd), ZTPD_ETCD_ARGS adds
arguments (tests: ports).
"""
import json
import os
import ssl
import sys
import time
import urllib.error
import urllib.request

ROOT = os.environ.get("ZTPD_ROOT", "")
ETCD = os.environ.get("ZTPD_ETCD_BIN", "/usr/local/bin/etcd")
CONFIG = "/etc/ztpd/etcd-member.json"
PKI = "/etc/kubernetes/pki/etcd"


def log(msg):
    print("ztpd-etcd-start: " + msg, file=sys.stderr, flush=True)


def host(addr):
    return "[%s]" % addr if ":" in addr else addr


def tls_context():
    ctx = ssl.create_default_context(cafile=ROOT + PKI + "/ca.crt")
    ctx.load_cert_chain(ROOT + PKI + "/peer.crt", ROOT + PKI + "/peer.key")
    return ctx


def call(endpoint, path, body):
    req = urllib.request.Request("https://%s%s" % (endpoint, path), data=json.dumps(body).encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
    with urllib.request.urlopen(req, context=tls_context(), timeout=10) as r:
        return json.loads(r.read())


def add_self(endpoints, name, peer_url):
    """Adds this member through the first endpoint that answers and returns
    etcd's member list, this member (unnamed until it starts) included."""
    last = None
    for attempt in range(30):
        for ep in endpoints:
            try:
                listed = call(ep, "/v3/cluster/member/list", {}).get("members", [])
                if not any(peer_url in m.get("peerURLs", []) for m in listed):
                    log("adding member %s (%s) through %s" % (name, peer_url, ep))
                    call(ep, "/v3/cluster/member/add", {"peerURLs": [peer_url]})
                    listed = call(ep, "/v3/cluster/member/list", {}).get("members", [])
                else:
                    log("member %s (%s) was added already" % (name, peer_url))
                return listed
            except (OSError, ValueError, urllib.error.URLError) as e:
                last = "%s: %s" % (ep, e)
        time.sleep(min(2 * (attempt + 1), 10))
    raise SystemExit("ztpd-etcd-start: no member answered to add this one (%s)" % last)


def initial_cluster(members, name, peer_url):
    parts = []
    for m in members:
        urls = m.get("peerURLs", [])
        n = m.get("name") or (name if peer_url in urls else "")
        if not n:
            # Another member added but not started yet: etcd would refuse
            # an initial cluster without it, and it has no name to list.
            raise SystemExit("ztpd-etcd-start: member %s is added but not started; retrying later" % m.get("ID"))
        parts += ["%s=%s" % (n, u) for u in urls]
    return ",".join(parts)


def main():
    with open(ROOT + CONFIG) as f:
        cfg = json.load(f)
    name, addr = cfg["name"], cfg["addr"]
    data = ROOT + cfg.get("data_dir", "/var/lib/etcd")
    peer_url = "https://%s:2380" % host(addr)
    client_url = "https://%s:2379" % host(addr)
    listen_clients = [client_url]
    # etcdctl on the node itself dials loopback (the server certificate
    # names it); ZTPD_ETCD_LOOPBACK=0 leaves it out (several members on one
    # test host).
    if addr != "127.0.0.1" and os.environ.get("ZTPD_ETCD_LOOPBACK", "1") != "0":
        listen_clients.append("https://127.0.0.1:2379")
    pki = ROOT + PKI
    args = [ETCD, "--name", name, "--data-dir", data,
            "--listen-client-urls", ",".join(listen_clients), "--advertise-client-urls", client_url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--cert-file", pki + "/server.crt", "--key-file", pki + "/server.key",
            "--client-cert-auth", "--trusted-ca-file", pki + "/ca.crt",
            "--peer-cert-file", pki + "/peer.crt", "--peer-key-file", pki + "/peer.key",
            "--peer-client-cert-auth", "--peer-trusted-ca-file", pki + "/ca.crt"]
    extra = os.environ.get("ZTPD_ETCD_ARGS", "").split()
    if os.path.isdir(os.path.join(data, "member")):
        log("member %s restarts from %s" % (name, data))
    elif cfg.get("new"):
        log("member %s starts a new etcd cluster" % name)
        args += ["--initial-cluster", "%s=%s" % (name, peer_url), "--initial-cluster-state", "new"]
    else:
        members = add_self(cfg.get("join_endpoints", []), name, peer_url)
        args += ["--initial-cluster", initial_cluster(members, name, peer_url), "--initial-cluster-state", "existing"]
    os.execv(ETCD, args + extra)


if __name__ == "__main__":
    main()
