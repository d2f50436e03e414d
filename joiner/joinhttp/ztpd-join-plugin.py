#!/usr/bin/env python3
"""ztpd join plugin for SONiC ZTP.

SONiC ZTP runs it as `ztpd-join-plugin <input.json>`, where input.json is
{"<section name>": {...section...}}. The section (rendered by ztpd) carries
"enrollment" (a one-time secret bound to this switch), "join-url", "mac",
"serial" and "hostname", and "tls-pin" when ztpd's join URL is https.

The switch's key is made here and never leaves the switch: the key
sonic-ctrmgrd presents (restapiserver.key) is reused when it is there (a
retry of this join), else a fresh ECDSA P-256 key is written there, mode
0600, with openssl. The plugin posts the section's facts with a
certificate signing request for that key (an empty subject: ztpd fills in
the switch's) to ztpd, which answers with this switch's join bundle
(asking for large files gzip+base64 encoded, a third of their size); the
plugin installs its files (the client certificate for that key, the
cluster CA for the trust store, or a k3s agent configuration) and, for the
SONiC method, writes KUBERNETES_MASTER|SERVER into CONFIG_DB so ctrmgrd
joins with them. When the bundle carries the device agent ("agent": true,
its files among the others), the plugin enables the agent's systemd timer.
The report URL, credential and, when the URL is ztpd's HTTPS listener, its
pins go to /etc/sonic/ztpd/report.env (ZTPD_REPORT_URL, _TOKEN, _PIN):
what reports the join posts with curl -k --pinnedpubkey "$ZTPD_REPORT_PIN".

With "tls-pin" (curl's "sha256//<base64>" public key pins, several
separated by ";") and an https join URL, the plugin talks to ztpd through
curl --pinnedpubkey: the server must present one of those keys, whatever
certificate authority signed it. A server that does not is not ztpd: the
plugin stops at once and says so, without retrying.

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

# Where sonic-ctrmgrd reads its join credential (kube_commands.py AME_KEY,
# AME_CRT).
KEY_PATH = "/etc/sonic/credentials/restapiserver.key"
CERT_PATH = "/etc/sonic/credentials/restapiserver.crt"
# curl's exit status when the server's key matches no pin
# (CURLE_SSL_PINNEDPUBKEYNOTMATCH).
CURL_PIN_MISMATCH = 90


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


def openssl(*args, data=None):
    try:
        r = subprocess.run(["openssl"] + list(args), input=data, capture_output=True)
    except OSError as e:
        raise SystemExit("ztpd-join: openssl is needed to make the switch's key: %s" % e)
    if r.returncode != 0:
        raise SystemExit("ztpd-join: openssl %s: %s" % (args[0], r.stderr.decode(errors="replace").strip()))
    return r.stdout


def switch_key():
    """The path of the switch's private key: the one ctrmgrd reads when
    openssl can read it (a retry of this join keeps its key), else a fresh
    ECDSA P-256 key written there atomically, mode 0600. P-256: what ztpd
    issued before keys were made on switches, loaded by ctrmgrd's Python
    and by Kubernetes' Go clients alike, and made in a millisecond."""
    dest = ROOT + KEY_PATH
    if os.path.exists(dest):
        r = subprocess.run(["openssl", "pkey", "-in", dest, "-noout"], capture_output=True)
        if r.returncode == 0:
            log("using the switch's key at %s" % KEY_PATH)
            return dest
        log("the key at %s cannot be read (%s): making a new one" % (KEY_PATH, r.stderr.decode(errors="replace").strip()))
    install(KEY_PATH, openssl("ecparam", "-name", "prime256v1", "-genkey", "-noout"), 0o600)
    return dest


def make_csr(key_path):
    """A certificate signing request for the key, with an empty subject
    (ztpd issues the switch's name and groups) and no extensions: a
    minimal configuration, so a distribution's openssl.cnf adds none."""
    with tempfile.NamedTemporaryFile("w", suffix=".cnf") as cnf:
        cnf.write("[req]\ndistinguished_name = dn\n[dn]\n")
        cnf.flush()
        return openssl("req", "-new", "-config", cnf.name, "-key", key_path, "-subj", "/", "-sha256").decode()


class PinMismatch(Exception):
    pass


def post(sec, data):
    """POSTs data to the section's join URL: (status, headers with
    lower-case names, body). Connection failures raise OSError."""
    url, pin = sec["join-url"], sec.get("tls-pin", "")
    headers = {"Content-Type": "application/json", "User-Agent": "SONiC-ZTP/0.1"}
    if pin and url.startswith("https://"):
        return post_pinned(url, data, pin, headers)
    if pin:
        log("tls-pin ignored: %s is not https" % url)
    req = urllib.request.Request(url, data=data, method="POST", headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as resp:
            return resp.status, {k.lower(): v for k, v in resp.headers.items()}, resp.read()
    except urllib.error.HTTPError as e:
        return e.code, {k.lower(): v for k, v in e.headers.items()}, e.read()
    except urllib.error.URLError as e:
        raise OSError(str(e.reason))


def post_pinned(url, data, pin, headers):
    """post through curl with the server's public key pinned. -k: the pin,
    which curl checks even then, is the trust, not a CA the switch would
    need first. The body (it holds the enrollment secret) goes through
    stdin, never the command line."""
    with tempfile.TemporaryDirectory() as d:
        hdr, body = os.path.join(d, "headers"), os.path.join(d, "body")
        cmd = ["curl", "-sS", "-k", "--pinnedpubkey", pin, "--max-time", "30", "-X", "POST",
               "--data-binary", "@-", "-D", hdr, "-o", body, "-w", "%{http_code}"]
        for k, v in headers.items():
            cmd += ["-H", "%s: %s" % (k, v)]
        try:
            r = subprocess.run(cmd + ["--", url], input=data, capture_output=True)
        except OSError as e:
            raise SystemExit("ztpd-join: curl is needed for the pinned connection: %s" % e)
        if r.returncode == CURL_PIN_MISMATCH:
            raise PinMismatch(r.stderr.decode(errors="replace").strip())
        if r.returncode != 0:
            raise OSError("curl exit %d: %s" % (r.returncode, r.stderr.decode(errors="replace").strip()))
        got = {}
        with open(hdr, errors="replace") as f:
            for line in f:
                if line.startswith("HTTP/"):
                    got = {}  # the last response's headers
                elif ":" in line:
                    k, v = line.split(":", 1)
                    got[k.strip().lower()] = v.strip()
        with open(body, "rb") as f:
            return int(r.stdout.decode() or 0), got, f.read()


def request_bundle(sec, csr):
    body = {"enrollment": sec["enrollment"], "kind": "sonic", "file_encodings": ["gzip+base64"], "csr": csr}
    for k in ("mac", "serial", "hostname"):
        if sec.get(k):
            body[k] = sec[k]
    data = json.dumps(body).encode()
    deadline = time.time() + MAX_WAIT
    failures = 0
    while True:
        try:
            status, headers, payload = post(sec, data)
            if status == 200:
                return json.loads(payload)
            if status == 202:
                wait = int(headers.get("retry-after") or 30)
                log("waiting: " + json.loads(payload or b"{}").get("reason", "not admitted yet"))
            elif status in (400, 403, 404, 409):
                raise SystemExit("ztpd-join: refused (%d): %s" % (status, payload.decode(errors="replace")))
            else:
                failures += 1
                wait = int(headers.get("retry-after") or 10)
                log("server error %d, retrying" % status)
        except PinMismatch as e:
            raise SystemExit("ztpd-join: stopped: the server at %s presents a key that matches no tls-pin of the section, "
                             "so it is not this switch's ztpd (%s)" % (sec["join-url"], e))
        except OSError as e:
            failures += 1
            wait = 10
            log("cannot reach %s: %s" % (sec["join-url"], e))
        if failures > 30 or time.time() + wait > deadline:
            raise SystemExit("ztpd-join: gave up waiting for admission")
        time.sleep(max(1, min(wait, 300)))


def check_certificate(bundle, key_path):
    """Refuses a bundle whose client certificate is not for the switch's key."""
    for f in bundle.get("files", []):
        if f["path"] == CERT_PATH:
            cert_key = openssl("x509", "-noout", "-pubkey", data=file_content(f))
            if cert_key != openssl("pkey", "-in", key_path, "-pubout"):
                raise SystemExit("ztpd-join: the certificate ztpd issued is not for this switch's key")


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
    key_path = switch_key()
    bundle = request_bundle(sec, make_csr(key_path))
    check_certificate(bundle, key_path)
    log("admitted to cluster %s as %s (%s)" % (bundle.get("cluster_name"), bundle.get("role"), bundle.get("method")))
    trust_store = False
    for f in bundle.get("files", []):
        install(f["path"], file_content(f), int(f["mode"], 8))
        trust_store = trust_store or f["path"].startswith("/usr/local/share/ca-certificates/")
    if trust_store:
        run(["update-ca-certificates"])
    if bundle.get("report_url") and bundle.get("report_token"):
        # What reports joined/failed: POST {"state": ...} to the URL with
        # the token as a bearer credential; with a pin (the https report
        # URL), through curl -k --pinnedpubkey "$ZTPD_REPORT_PIN", so the
        # credential never crosses in clear.
        env = "ZTPD_REPORT_URL='%s'\nZTPD_REPORT_TOKEN='%s'\n" % (bundle["report_url"], bundle["report_token"])
        if bundle.get("report_pin"):
            env += "ZTPD_REPORT_PIN='%s'\n" % bundle["report_pin"]
        install("/etc/sonic/ztpd/report.env", env, 0o600)
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
