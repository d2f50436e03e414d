#!/usr/bin/env python3
"""ztpd join waiter for CloudStack VMs.

The VM's user-data (fetched in clear) installs this script, its
configuration /etc/ztpd/join-wait.json ({"url": ..., "pin": ...}) and its
systemd unit, and starts the unit without holding up the boot. The
waiter asks ztpd's device HTTPS listener for the node's join data (the
files and commands that join it to its cluster: the kubeadm
configuration with its bootstrap token, the first control plane's CA,
the report and agent credentials) with curl --pinnedpubkey: the server
must present one of the pinned keys ("sha256//<b64>", several joined by
";"), whatever certificate authority signed it.

  200  the join data: its files are written atomically with their modes,
       /var/lib/ztpd/join-data marks the node done (the unit does not run
       again), then its commands run in order, as cloud-init's runcmd.
  503  the node waits (approval, its cluster, the first control plane):
       asked again after Retry-After, at most ZTPD_WAIT_CAP seconds
       (default 300).
  409  ztpd hands this node's join data out no more (already issued;
  410  `ztpd device reset ID` allows a new one): logged, exit 3.
  a server whose key matches no pin is not ztpd: logged, exit 3, no retry.
  anything else is retried.

In a cluster with etcd nodes ("etcd_keys": true) the waiter first makes
the etcd keys a role there may need, with openssl, on this node (an etcd
node's server and peer keys, a first control plane's
apiserver-etcd-client key), and POSTs their certificate signing requests
with each ask: ztpd signs those of the role it gives this node, for the
names this node holds. Once admitted, the keys its role does not use are
removed.

Exit 3 is a stop the unit does not restart (RestartPreventExitStatus).
ZTPD_ROOT prefixes every path read or written (for tests); under it the
commands are logged and skipped, as the SONiC join plugin does.
"""
import base64
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time

ROOT = os.environ.get("ZTPD_ROOT", "")
WAIT_CAP = max(1, int(os.environ.get("ZTPD_WAIT_CAP", "300")))
CONFIG = "/etc/ztpd/join-wait.json"
DONE = "/var/lib/ztpd/join-data"
# curl's exit status when the server's key matches no pin
# (CURLE_SSL_PINNEDPUBKEYNOTMATCH).
CURL_PIN_MISMATCH = 90
EXIT_STOPPED = 3


def log(msg):
    print("ztpd-join-wait: " + msg, flush=True)


class Stop(Exception):
    """A reason to stop for good: retrying would change nothing."""


# Where a node of a cluster with etcd nodes keeps the etcd keys it makes
# (kubeadm's paths), by the request ztpd signs for them.
ETCD_KEYS = {
    "server": "/etc/kubernetes/pki/etcd/server.key",
    "peer": "/etc/kubernetes/pki/etcd/peer.key",
    "client": "/etc/kubernetes/pki/apiserver-etcd-client.key",
}


def etcd_requests():
    """Makes (once: a restarted waiter keeps them) the etcd keys with
    openssl and returns their certificate signing requests, by name. The
    subject is empty: ztpd fills in the names this node holds."""
    out = {}
    for name, path in ETCD_KEYS.items():
        key = ROOT + path
        if not os.path.exists(key):
            os.makedirs(os.path.dirname(key), exist_ok=True)
            old = os.umask(0o077)
            try:
                subprocess.run(["openssl", "ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", key],
                               check=True, capture_output=True)
            finally:
                os.umask(old)
        with tempfile.NamedTemporaryFile("w", suffix=".cnf") as cnf:
            cnf.write("[req]\ndistinguished_name = dn\n[dn]\n")
            cnf.flush()
            r = subprocess.run(["openssl", "req", "-new", "-config", cnf.name, "-key", key, "-subj", "/", "-sha256"],
                               check=True, capture_output=True)
        out[name] = r.stdout.decode()
    return out


def drop_unused_etcd_keys(data):
    """Removes the etcd keys this node's role does not use: an etcd node
    keeps its server and peer keys, the first control plane its client
    key; the other control planes get theirs from kubeadm's uploaded
    certificates."""
    keep = set()
    if data.get("role") == "etcd":
        keep = {"server", "peer"}
    elif data.get("init"):
        keep = {"client"}
    for name, path in ETCD_KEYS.items():
        if name not in keep and os.path.exists(ROOT + path):
            os.unlink(ROOT + path)
            log("removed %s: this node's role does not use it" % path)


def fetch(url, pin, body=None):
    """GETs url (POSTs body as JSON, when given) through curl with the
    server's key pinned: (status, headers with lower-case names, body). -k:
    the pin, which curl checks even then, is the trust, not a CA the VM
    would need first."""
    with tempfile.TemporaryDirectory() as d:
        hdr, out = os.path.join(d, "headers"), os.path.join(d, "body")
        cmd = ["curl", "-sS", "-k", "--pinnedpubkey", pin, "--max-time", "60", "-H", "Accept: application/json",
               "-D", hdr, "-o", out, "-w", "%{http_code}"]
        if body is not None:
            req = os.path.join(d, "request")
            with open(req, "w") as f:
                json.dump(body, f)
            cmd += ["-H", "Content-Type: application/json", "--data-binary", "@" + req]
        cmd += ["--", url]
        try:
            r = subprocess.run(cmd, capture_output=True)
        except OSError as e:
            raise Stop("curl is needed for the pinned connection: %s" % e)
        if r.returncode == CURL_PIN_MISMATCH:
            raise Stop("the server at %s presents a key that matches no pin of this node's user-data, so it is not "
                       "this node's ztpd (%s)" % (url, r.stderr.decode(errors="replace").strip()))
        if r.returncode != 0:
            raise OSError("curl exit %d: %s" % (r.returncode, r.stderr.decode(errors="replace").strip()))
        headers = {}
        with open(hdr, errors="replace") as f:
            for line in f:
                if line.startswith("HTTP/"):
                    headers = {}  # the last response's headers
                elif ":" in line:
                    k, v = line.split(":", 1)
                    headers[k.strip().lower()] = v.strip()
        with open(out, "rb") as f:
            return int(r.stdout.decode() or 0), headers, f.read()


def retry_after(headers, default):
    try:
        secs = int(headers.get("retry-after", ""))
    except ValueError:
        secs = default
    return max(1, min(secs, WAIT_CAP))


def message(payload):
    """The reason of ztpd's error body, else the body's start."""
    try:
        return json.loads(payload)["error"]["message"]
    except (ValueError, KeyError, TypeError):
        return payload.decode(errors="replace")[:300]


def wait_for_join_data(url, pin, body=None):
    failures = 0
    said = None
    while True:
        try:
            status, headers, payload = fetch(url, pin, body)
        except OSError as e:
            failures += 1
            wait = min(5 * failures, WAIT_CAP)
            log("cannot reach %s: %s; again in %ds" % (url, e, wait))
        else:
            if status == 200:
                return json.loads(payload)
            reason = message(payload)
            if status in (409, 410):
                raise Stop("ztpd hands out this node's join data no more (%d): %s" % (status, reason))
            if status in (429, 503):
                wait = retry_after(headers, 30)
                if reason != said:
                    log("waiting: %s" % reason)
                    said = reason
                log("asking again in %ds" % wait)
            else:
                # A refusal (no lease yet, a profile being fixed) may end:
                # ask again, slowly.
                wait = retry_after(headers, 60)
                log("refused (%d): %s; again in %ds" % (status, reason, wait))
        time.sleep(wait)


def content(f):
    enc = f.get("encoding", "")
    if enc == "gzip+base64":
        return gzip.decompress(base64.b64decode(f["content"], validate=True))
    if enc:
        raise Stop("%s: unknown encoding %r" % (f["path"], enc))
    return f["content"].encode()


def install(path, data, mode):
    if not path.startswith("/") or "\0" in path:
        raise Stop("refused file path %r" % path)
    dest = ROOT + os.path.normpath(path)
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".ztpd-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, dest)
    except BaseException:
        os.unlink(tmp)
        raise
    log("installed %s (%04o)" % (path, mode))


def run(cmd):
    if ROOT:
        log("skipped: " + cmd)
        return True
    log("running: " + cmd)
    r = subprocess.run(["/bin/sh", "-c", cmd])
    if r.returncode != 0:
        log("failed (exit %d): %s" % (r.returncode, cmd))
    return r.returncode == 0


def main():
    if os.path.exists(ROOT + DONE):
        log("join data already installed (%s)" % DONE)
        return 0
    with open(ROOT + CONFIG) as f:
        cfg = json.load(f)
    url, pin = cfg.get("url", ""), cfg.get("pin", "")
    if not url.startswith("https://") or not pin:
        log("stopped: %s needs an https url and a pin" % CONFIG)
        return EXIT_STOPPED
    try:
        body = None
        if cfg.get("etcd_keys"):
            try:
                body = {"etcd_csrs": etcd_requests()}
            except (OSError, subprocess.CalledProcessError) as e:
                raise Stop("cannot make this node's etcd keys with openssl: %s" % e)
        data = wait_for_join_data(url, pin, body)
        log("admitted to cluster %s as %s" % (data.get("cluster_name"), data.get("role")))
        if body is not None:
            drop_unused_etcd_keys(data)
        for f in data.get("files", []):
            install(f["path"], content(f), int(f["mode"], 8))
    except Stop as e:
        log("stopped: %s" % e)
        return EXIT_STOPPED
    install(DONE, time.strftime("%Y-%m-%dT%H:%M:%SZ\n", time.gmtime()).encode(), 0o644)
    ok = True
    for cmd in data.get("commands", []):
        ok = run(cmd) and ok
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
