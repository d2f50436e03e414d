#!/usr/bin/env python3
"""ztpd join plugin for SONiC ZTP.

SONiC ZTP runs it as `ztpd-join-plugin <input.json>`, where input.json is
{"<section name>": {...section...}}. The section (rendered by ztpd) carries
"enrollment" (a one-time secret bound to this switch), "join-url", "mac",
"serial" and "hostname". The plugin posts them to ztpd, which answers with
this switch's join bundle (asking for large files gzip+base64 encoded,
a third of their size); the plugin installs its files (client
certificate and key for sonic-ctrmgrd, the cluster CA for the trust store,
or a k3s agent configuration) and, for the SONiC method, writes
KUBERNETES_MASTER|SERVER into CONFIG_DB so ctrmgrd joins with them. When
the bundle carries the device agent ("agent": true, its files among the
others), the plugin enables the agent's systemd timer.

Exit 0 on success, non-zero on failure (ZTP records the section FAILED).
ZTPD_ROOT prefixes every written path (for tests); ZTPD_MAX_WAIT bounds the
seconds spent waiting for admission (default 1800).
"""
import base64
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

ROOT = os.environ.get("ZTPD_ROOT", "")
MAX_WAIT = int(os.environ.get("ZTPD_MAX_WAIT", "1800"))


def log(msg):
    print("ztpd-join: " + msg, flush=True)


def section_data(path):
    with open(path) as f:
        doc = json.load(f)
    if isinstance(doc, dict) and "enrollment" not in doc and len(doc) == 1:
        doc = next(iter(doc.values()))
    if not isinstance(doc, dict) or not doc.get("enrollment") or not doc.get("join-url"):
        raise SystemExit("ztpd-join: section lacks enrollment or join-url")
    return doc


def request_bundle(sec):
    body = {"enrollment": sec["enrollment"], "kind": "sonic", "file_encodings": ["gzip+base64"]}
    for k in ("mac", "serial", "hostname"):
        if sec.get(k):
            body[k] = sec[k]
    data = json.dumps(body).encode()
    deadline = time.time() + MAX_WAIT
    failures = 0
    while True:
        req = urllib.request.Request(sec["join-url"], data=data, method="POST",
                                     headers={"Content-Type": "application/json", "User-Agent": "SONiC-ZTP/0.1"})
        try:
            with urllib.request.urlopen(req, timeout=30) as resp:
                payload = resp.read()
                if resp.status == 200:
                    return json.loads(payload)
                wait = int(resp.headers.get("Retry-After") or 30)
                log("waiting: " + json.loads(payload or b"{}").get("reason", "not admitted yet"))
        except urllib.error.HTTPError as e:
            if e.code in (400, 403, 404, 409):
                raise SystemExit("ztpd-join: refused (%d): %s" % (e.code, e.read().decode(errors="replace")))
            failures += 1
            wait = int(e.headers.get("Retry-After") or 10)
            log("server error %d, retrying" % e.code)
        except (urllib.error.URLError, OSError) as e:
            failures += 1
            wait = 10
            log("cannot reach %s: %s" % (sec["join-url"], e))
        if failures > 30 or time.time() + wait > deadline:
            raise SystemExit("ztpd-join: gave up waiting for admission")
        time.sleep(max(1, min(wait, 300)))


def file_content(f):
    """A bundle file's content as bytes, decoded as its "encoding" says."""
    enc = f.get("encoding", "")
    if enc == "gzip+base64":
        return gzip.decompress(base64.b64decode(f["content"], validate=True))
    if enc:
        raise SystemExit("ztpd-join: %s: unknown encoding %r" % (f["path"], enc))
    return f["content"].encode()


def install(path, content, mode):
    if isinstance(content, str):
        content = content.encode()
    dest = ROOT + path
    os.makedirs(os.path.dirname(dest), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".ztpd-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(content)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, dest)
    except BaseException:
        os.unlink(tmp)
        raise
    log("installed %s (%04o)" % (path, mode))


def run(cmd):
    if ROOT or shutil.which(cmd[0]) is None:
        log("skipped: " + " ".join(cmd))
        return
    subprocess.run(cmd, check=True)


def main():
    if len(sys.argv) < 2:
        raise SystemExit("usage: ztpd-join-plugin <input.json>")
    sec = section_data(sys.argv[1])
    bundle = request_bundle(sec)
    log("admitted to cluster %s as %s (%s)" % (bundle.get("cluster_name"), bundle.get("role"), bundle.get("method")))
    trust_store = False
    for f in bundle.get("files", []):
        install(f["path"], file_content(f), int(f["mode"], 8))
        trust_store = trust_store or f["path"].startswith("/usr/local/share/ca-certificates/")
    if trust_store:
        run(["update-ca-certificates"])
    if bundle.get("report_url") and bundle.get("report_token"):
        # The node agent reports joined/failed with this once it has joined.
        install("/etc/sonic/ztpd/report.env",
                "ZTPD_REPORT_URL='%s'\nZTPD_REPORT_TOKEN='%s'\n" % (bundle["report_url"], bundle["report_token"]), 0o600)
    if bundle.get("config_db"):
        run(["sonic-cfggen", "-a", json.dumps(bundle["config_db"]), "--write-to-db"])
        run(["config", "save", "-y"])
    if bundle.get("method") == "k3s":
        run(["systemctl", "restart", "k3s-agent"])
    if bundle.get("agent"):
        # The device agent (installed with the files above) polls ztpd for
        # day-2 operations from now on; its timer survives reboots.
        run(["systemctl", "daemon-reload"])
        run(["systemctl", "enable", "--now", "ztpd-agent.timer"])
    return 0


if __name__ == "__main__":
    sys.exit(main())
