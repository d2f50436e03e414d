#!/usr/bin/env python3
"""ztpd device agent (day-2 operations, protocol v1).

Installed at join (see joiner/agent) and run by ztpd-agent.timer as
`ztpd-agent once`: deliver the reports a previous run could not, ask ztpd
for this device's desired state, and run or resume the current operation's
steps. When ztpd asks for polls more often than the configured interval
(poll_seconds: the device is in a running rollout), the run keeps polling
at that pace, past the interval, for as long as ztpd asks (at most
linger_max seconds), then leaves the next poll to the timer.
`ztpd-agent run` loops (foreground, tests); `ztpd-agent status` prints the
state file and the run in progress.

Each run also reports the device's LLDP neighbours (`lldpctl -f json`, on
the host or in SONiC's lldp container) to /agent/v1/neighbors when they
changed since the last report ztpd took, so ztpd checks the cabling against
its plan; without lldpctl or neighbours nothing is sent.

Exit codes: 0 ok, 1 transient error (the timer retries), 2 usage or
configuration error, 3 the server failed TLS verification, 4 ztpd refused
the credential. Nothing is acted on after 3 or 4.

python3 standard library only (SONiC images have nothing else). ZTPD_ROOT
prefixes every path the agent reads or writes (tests); commands are always
taken from PATH.
"""
import argparse
import fcntl
import hashlib
import http.client
import json
import os
import random
import re
import shutil
import signal
import ssl
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

AGENT_VERSION = "1"
ROOT = os.environ.get("ZTPD_ROOT", "")
CONFIG_PATH = "/etc/ztpd/agent.json"
BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
OUTPUT_TAIL = 16 * 1024  # bytes of a step's output kept and reported
MAX_PENDING = 200        # undelivered reports kept (oldest dropped first)
HTTP_TIMEOUT = 30
SHA256_RE = re.compile(r"^[0-9a-f]{64}$")
VERSION_RE = re.compile(r"^v\d+\.\d+\.\d+([-+][0-9A-Za-z.-]+)?$")
FEATURE_RE = re.compile(r"^[A-Za-z0-9_-]+$")
CONTROL_CHARS = {c: "?" for c in list(range(32)) + [127] if chr(c) not in "\n\t"}

EXIT_OK, EXIT_TRANSIENT, EXIT_USAGE, EXIT_UNVERIFIED, EXIT_REFUSED = 0, 1, 2, 3, 4
# How long a run polls on at most while ztpd asks for faster polls
# (agent.json's linger_max; joiner/agent.LingerMax writes it). The service's
# TimeoutStartSec allows for it.
LINGER_MAX = 3600
# Polls in a row that may fail while a run polls on before it leaves the
# retries to the timer.
LINGER_FAILURES = 3

# exit_code reported when the agent itself failed the step (bad arguments,
# checksum mismatch) without a command deciding it.
AGENT_FAILED = -1


def log(msg):
    print("ztpd-agent: " + msg, flush=True)


def rooted(path):
    return ROOT + path


class Exit(Exception):
    """Ends the run with an exit code and a logged reason."""

    def __init__(self, code, msg):
        super().__init__(msg)
        self.code = code


class Unreachable(Exception):
    """ztpd (or a download) could not be reached, or answered 5xx: retry later."""


class StepFailed(Exception):
    """The agent failed a step itself; the message goes into its output."""


def write_atomic(path, data, mode):
    """tmp + fsync + rename + fsync of the directory."""
    d = os.path.dirname(path)
    os.makedirs(d, mode=0o700, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=d, prefix=".ztpd-agent-")
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
    dfd = os.open(d, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def read_boot_id():
    try:
        with open(rooted(BOOT_ID_PATH)) as f:
            return f.read().strip()
    except OSError:
        return ""


def os_release_id():
    try:
        with open(rooted("/etc/os-release")) as f:
            for line in f:
                if line.startswith("ID="):
                    return line[3:].strip().strip('"')
    except OSError:
        pass
    return ""


def load_config(path):
    try:
        with open(rooted(path)) as f:
            cfg = json.load(f)
    except (OSError, ValueError) as e:
        raise Exit(EXIT_USAGE, "cannot read %s: %s" % (path, e))
    if not isinstance(cfg, dict):
        raise Exit(EXIT_USAGE, "%s is not a JSON object" % path)
    url = cfg.get("url")
    parts = urllib.parse.urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme != "https" or not parts.hostname:
        raise Exit(EXIT_USAGE, "refusing url %r: only https:// is allowed" % (url,))
    if not isinstance(cfg.get("credential"), str) or not cfg["credential"]:
        raise Exit(EXIT_USAGE, "%s has no credential" % path)
    cfg["url"] = url.rstrip("/")
    cfg.setdefault("ca_file", "/etc/ztpd/appliance-ca.pem")
    cfg.setdefault("state_dir", "/var/lib/ztpd-agent")
    cfg.setdefault("device", "")
    interval = cfg.get("interval", 60)
    if not isinstance(interval, int) or interval < 1:
        raise Exit(EXIT_USAGE, "interval must be a positive number of seconds")
    cfg["interval"] = interval
    linger_max = cfg.get("linger_max", LINGER_MAX)
    if not isinstance(linger_max, int) or linger_max < 0:
        raise Exit(EXIT_USAGE, "linger_max must be a number of seconds (0: no polling on)")
    cfg["linger_max"] = linger_max
    return cfg


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """Requests carrying the credential never follow a redirect."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


class Client:
    """HTTPS to ztpd, verified against the pinned CA file."""

    def __init__(self, cfg):
        self.base = cfg["url"]
        self.origin = urllib.parse.urlsplit(self.base)[:2]
        self.credential = cfg["credential"]
        ca = rooted(cfg["ca_file"])
        try:
            self.ctx = ssl.create_default_context(cafile=ca)
            # Downloads elsewhere (image mirrors) may use public CAs; their
            # content is pinned by sha256 anyway.
            self.download_ctx = ssl.create_default_context()
            self.download_ctx.load_verify_locations(cafile=ca)
        except (OSError, ssl.SSLError) as e:
            raise Exit(EXIT_USAGE, "cannot load ca_file %s: %s" % (cfg["ca_file"], e))
        self.api = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self.ctx), NoRedirect)
        self.public = urllib.request.build_opener(urllib.request.HTTPSHandler(context=self.download_ctx))

    def open(self, url, data=None, authenticated=True):
        """Returns (status, response or error body stream). Raises Unreachable
        when there is no answer. With the credential (talking to ztpd): Exit 3
        on a TLS verification failure, Exit 4 on 401/403; without it (a
        download elsewhere) a verification failure fails the step."""
        headers = {"User-Agent": "ztpd-agent/" + AGENT_VERSION}
        if authenticated:
            headers["Authorization"] = "Bearer " + self.credential
        if data is not None:
            headers["Content-Type"] = "application/json"
        req = urllib.request.Request(url, data=data, headers=headers, method="POST" if data is not None else "GET")
        opener = self.api if authenticated else self.public
        try:
            resp = opener.open(req, timeout=HTTP_TIMEOUT)
        except urllib.error.HTTPError as e:
            if authenticated and e.code in (401, 403):
                raise Exit(EXIT_REFUSED, "credential refused (HTTP %d): %s" % (e.code, error_message(e.read())))
            return e.code, e
        except urllib.error.URLError as e:
            if isinstance(e.reason, ssl.SSLCertVerificationError):
                self.unverified(url, e.reason, authenticated)
            raise Unreachable("cannot reach %s: %s" % (url, e.reason))
        except ssl.SSLCertVerificationError as e:
            self.unverified(url, e, authenticated)
        except (OSError, http.client.HTTPException) as e:
            raise Unreachable("cannot reach %s: %s" % (url, e))
        return resp.status, resp

    @staticmethod
    def unverified(url, err, authenticated):
        if authenticated:
            raise Exit(EXIT_UNVERIFIED, "refusing unverified server: %s" % err)
        raise StepFailed("refusing unverified server %s: %s" % (url, err))

    def call(self, path, body=None):
        """An API call: (status, parsed JSON answer or {})."""
        data = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        status, resp = self.open(self.base + path, data)
        try:
            raw = resp.read()
        except (OSError, http.client.HTTPException) as e:
            raise Unreachable("reading %s: %s" % (path, e))
        finally:
            resp.close()
        if status >= 500 or status == 429:
            raise Unreachable("%s: HTTP %d: %s" % (path, status, error_message(raw)))
        try:
            doc = json.loads(raw) if raw else {}
        except ValueError:
            doc = {"_raw": raw[:200].decode("utf-8", "replace")}
        return status, doc

    def download(self, url, dest, sha256, mode):
        """Fetches url into dest atomically; a given sha256 must match."""
        parts = urllib.parse.urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise StepFailed("refusing to download %r: not an http(s) URL" % url)
        if sha256 and not SHA256_RE.match(sha256):
            raise StepFailed("bad sha256 %r" % sha256)
        # The credential goes only to ztpd's own origin.
        status, resp = self.open(url, authenticated=parts[:2] == self.origin)
        try:
            if status >= 500 or status == 429:
                raise Unreachable("downloading %s: HTTP %d" % (url, status))
            if status != 200:
                raise StepFailed("downloading %s: HTTP %d" % (url, status))
            d = os.path.dirname(dest)
            os.makedirs(d, mode=0o700, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=d, prefix=".ztpd-agent-")
            h = hashlib.sha256()
            try:
                with os.fdopen(fd, "wb") as f:
                    for chunk in iter(lambda: resp.read(1 << 20), b""):
                        h.update(chunk)
                        f.write(chunk)
                    f.flush()
                    os.fsync(f.fileno())
                if sha256 and h.hexdigest() != sha256:
                    raise StepFailed("sha256 mismatch for %s: got %s, want %s" % (url, h.hexdigest(), sha256))
                os.chmod(tmp, mode)
                os.rename(tmp, dest)
            except (OSError, http.client.HTTPException) as e:
                os.unlink(tmp)
                raise Unreachable("downloading %s: %s" % (url, e))
            except BaseException:
                os.unlink(tmp)
                raise
        finally:
            resp.close()


def error_message(raw):
    """ztpd's error body {"error": {"message": ...}}, else the text."""
    try:
        doc = json.loads(raw)
        return str(doc["error"]["message"])
    except (ValueError, KeyError, TypeError):
        return raw[:200].decode("utf-8", "replace").strip() if isinstance(raw, bytes) else str(raw)


class Tail:
    """The last OUTPUT_TAIL bytes written (commands write from a reader thread)."""

    def __init__(self):
        self.buf = bytearray()
        self.lock = threading.Lock()

    def write(self, data):
        if isinstance(data, str):
            data = data.encode()
        with self.lock:
            self.buf += data
            if len(self.buf) > 2 * OUTPUT_TAIL:
                del self.buf[:-OUTPUT_TAIL]

    def text(self):
        """The tail as text for a report: binary output cannot inflate it
        past ztpd's 64 KiB report limit (control characters become "?",
        which JSON would escape to six bytes each)."""
        with self.lock:
            text = bytes(self.buf[-OUTPUT_TAIL:]).decode("utf-8", "replace")
        return text.translate(CONTROL_CHARS)


def run_command(argv, timeout, out, env=None):
    """Runs argv in its own process group, output into out; on timeout the
    whole group is killed. Returns the exit status (-N: killed by signal N)."""
    out.write("$ %s\n" % " ".join(argv))
    try:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                start_new_session=True, env=env)
    except OSError as e:
        out.write("ztpd-agent: cannot run %s: %s\n" % (argv[0], e))
        return 127

    def pump():
        fd = proc.stdout.fileno()
        while True:
            chunk = os.read(fd, 65536)
            if not chunk:
                return
            out.write(chunk)

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    timed_out = False
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        code = proc.wait()
    # A background child that kept the pipe open does not hold the step.
    reader.join(5)
    if not reader.is_alive():
        proc.stdout.close()
    if timed_out:
        out.write("\nztpd-agent: %s timed out after %ds; killed its process group\n" % (argv[0], timeout))
    return code


def arg_timeout(args, default):
    raw = args.get("timeout", "")
    if raw == "":
        return default
    try:
        t = int(raw)
    except ValueError:
        raise StepFailed("bad timeout %r" % raw)
    if t < 1:
        raise StepFailed("bad timeout %r" % raw)
    return t


# Actions: fn(agent, op, step, args, out) -> exit status (0 = succeeded).

def act_hook(agent, op, step, args, out):
    sha = args.get("sha256", "")
    if not SHA256_RE.match(sha):
        raise StepFailed("hook needs a sha256 (64 lower-case hex digits), got %r" % sha)
    if not args.get("url"):
        raise StepFailed("hook needs a url")
    timeout = arg_timeout(args, 300)
    path = os.path.join(agent.state_dir, "hooks", sha)
    if not (os.path.exists(path) and sha256_file(path) == sha):
        agent.client.download(args["url"], path, sha, 0o700)
    env = dict(os.environ, ZTPD_OPERATION=op["id"], ZTPD_STEP=step["name"], ZTPD_DEVICE=str(agent.cfg["device"]))
    return run_command([path], timeout, out, env)


def act_kubeadm_upgrade(agent, op, step, args, out):
    phase = args.get("phase", "node")
    version = args.get("version", "")
    if phase not in ("apply", "node"):
        raise StepFailed("phase must be apply or node, got %r" % phase)
    if phase == "apply" and not VERSION_RE.match(version):
        raise StepFailed("bad kubernetes version %r" % version)
    timeout = arg_timeout(args, 900)
    take_kubernetes_point(agent, op, out)
    if args.get("binaries_url"):
        base = args["binaries_url"].rstrip("/")
        for name in ("kubeadm", "kubelet"):
            agent.client.download(base + "/" + name, rooted("/usr/local/bin/" + name), args.get(name + "_sha256", ""), 0o755)
            out.write("ztpd-agent: installed /usr/local/bin/%s\n" % name)
    if phase == "apply":
        argv = ["kubeadm", "upgrade", "apply", "-y", version]
    else:
        argv = ["kubeadm", "upgrade", "node"]
    code = run_command(argv, timeout, out)
    if code != 0:
        # On a control plane kubeadm has rolled its static pod manifests
        # back itself; what it kept is named for the operator.
        if phase == "apply" or args.get("role") == "control-plane":
            kubeadm_backups(out)
        return code
    return run_command(["systemctl", "restart", "kubelet"], timeout, out)


def act_kube_reset(agent, op, step, args, out):
    timeout = arg_timeout(args, 600)
    features = [f.strip() for f in args.get("features", "").split(",") if f.strip()]
    for f in features:
        if not FEATURE_RE.match(f):
            raise StepFailed("bad feature name %r" % f)
    if args.get("platform") == "sonic" or os_release_id() == "sonic":
        if not features:
            # The features Kubernetes owns now go back to local ownership.
            features = kube_owned_features(timeout, out)
        cmds = [["config", "kube", "server", "disable", "on"]]
        cmds += [["config", "feature", "owner", f, "local"] for f in features]
        for argv in cmds:
            code = run_command(argv, timeout, out)
            if code != 0:
                return code
    if shutil.which("kubeadm"):
        code = run_command(["kubeadm", "reset", "-f"], timeout, out)
        if code != 0:
            return code
    for path in ("/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/pki"):
        p = rooted(path)
        if os.path.isdir(p) and not os.path.islink(p):
            shutil.rmtree(p)
        elif os.path.lexists(p):
            os.unlink(p)
        else:
            continue
        out.write("ztpd-agent: removed %s\n" % path)
    return 0


def kube_owned_features(timeout, out):
    """The FEATURE table entries whose set_owner is kube (CONFIG_DB)."""
    if shutil.which("sonic-db-cli") is None:
        out.write("ztpd-agent: no sonic-db-cli: feature owners left as they are\n")
        return []
    def db(*argv):
        r = subprocess.run(["sonic-db-cli", "CONFIG_DB"] + list(argv), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=timeout)
        return r.stdout.decode(errors="replace").split()
    owned = []
    for key in db("KEYS", "FEATURE|*"):
        name = key.split("|", 1)[-1]
        if FEATURE_RE.match(name) and db("HGET", key, "set_owner") == ["kube"]:
            owned.append(name)
    out.write("ztpd-agent: features owned by kube: %s\n" % (", ".join(sorted(owned)) or "none"))
    return sorted(owned)


def act_sonic_install(agent, op, step, args, out):
    url = args.get("url", "")
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise StepFailed("sonic-install needs an http(s) url, got %r" % url)
    timeout = arg_timeout(args, 1800)
    take_image_point(agent, op, timeout, out)
    image, target = None, url
    if args.get("sha256"):
        # sonic-installer does not check a digest: fetch and verify first.
        image = target = os.path.join(agent.state_dir, "sonic-image.bin")
        agent.client.download(url, image, args["sha256"], 0o600)
        out.write("ztpd-agent: image sha256 verified\n")
    try:
        return run_command(["sonic-installer", "install", "-y", target], timeout, out)
    finally:
        if image and os.path.exists(image):
            os.unlink(image)


def act_join(agent, op, step, args, out):
    if not args.get("enrollment") or not args.get("join_url"):
        raise StepFailed("join needs enrollment and join_url")
    timeout = arg_timeout(args, 2100)
    plugin = rooted("/usr/local/bin/ztpd-join-plugin")
    if not os.path.exists(plugin):
        if not args.get("plugin_url"):
            raise StepFailed("no join plugin installed and no plugin_url")
        plugin = os.path.join(agent.state_dir, "ztpd-join-plugin")
        agent.client.download(args["plugin_url"], plugin, args.get("plugin_sha256", ""), 0o700)
    section = {"enrollment": args["enrollment"], "join-url": args["join_url"]}
    for k in ("mac", "serial", "hostname"):
        if args.get(k):
            section[k] = args[k]
    if args.get("tls_pin"):  # the device HTTPS listener's pins, as ztp.json names them
        section["tls-pin"] = args["tls_pin"]
    # The same shape SONiC ZTP hands the plugin: {"<section>": {...}}.
    path = os.path.join(agent.state_dir, "join-section.json")
    write_atomic(path, json.dumps({"ztpd-join": section}).encode(), 0o600)
    try:
        return run_command([plugin, path], timeout, out)
    finally:
        os.unlink(path)  # it holds the enrollment secret


ACTIONS = {
    "hook": act_hook,
    "kubeadm-upgrade": act_kubeadm_upgrade,
    "kube-reset": act_kube_reset,
    "sonic-install": act_sonic_install,
    "join": act_join,
}


# What ztpd accepts of a neighbour report: at most 64, printable values of
# at most 255 bytes (the join plugin reads them the same way).
MAX_NEIGHBORS = 64
MAX_VALUE = 255


def lldp_json():
    """lldpctl's JSON, from the host's lldpctl or SONiC's lldp container; None without."""
    for argv in (["lldpctl", "-f", "json"], ["docker", "exec", "lldp", "lldpctl", "-f", "json"]):
        if shutil.which(argv[0]) is None:
            continue
        try:
            r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, timeout=15)
        except (OSError, subprocess.TimeoutExpired):
            continue
        if r.returncode != 0 or not r.stdout.strip():
            continue
        try:
            return json.loads(r.stdout)
        except ValueError:
            continue
    return None


def printable(v):
    return isinstance(v, str) and len(v.encode()) <= MAX_VALUE and \
        all(" " <= c and c != "\x7f" and not "\x80" <= c <= "\x9f" and c != "\ufffd" for c in v)


def lldp_neighbors(doc):
    """The neighbours in lldpctl's JSON: one interface is a mapping of its
    name to its neighbour, several are a list of such mappings. The remote
    system is the chassis' name (its key), else its id; the remote port is
    the port id when it is an interface name, else its description."""
    lldp = doc.get("lldp") if isinstance(doc, dict) else None
    ifaces = lldp.get("interface") if isinstance(lldp, dict) else None
    if isinstance(ifaces, dict):
        ifaces = [ifaces]
    if not isinstance(ifaces, list):
        return []
    out = []
    for item in ifaces:
        if not isinstance(item, dict):
            continue
        for port, n in item.items():
            if not isinstance(n, dict):
                continue
            system = ""
            ch = n.get("chassis")
            if isinstance(ch, dict):
                if isinstance(ch.get("id"), dict):
                    system = ch["id"].get("value", "")  # no system name
                else:
                    system = next((k for k, v in ch.items() if isinstance(v, dict)), "")
            rport = ""
            p = n.get("port")
            if isinstance(p, dict):
                pid = p.get("id") if isinstance(p.get("id"), dict) else {}
                if pid.get("type") in ("ifname", "local") and pid.get("value"):
                    rport = pid["value"]
                elif isinstance(p.get("descr"), str) and p["descr"]:
                    rport = p["descr"]
                else:
                    rport = pid.get("value", "")
            entry = {"port": port, "remote_system": system, "remote_port": rport}
            if port and all(printable(v) for v in entry.values()):
                out.append(entry)
    return out[:MAX_NEIGHBORS]


def fresh_state(operation=None, kind=None, pending=None, lldp_sent=None, rollback_point=None):
    """rollback_point is what the last image install or Kubernetes upgrade
    recorded to go back to; it outlives its operation, so a later rollback
    operation (ztpd's node timeout, an operator) can use it."""
    return {"operation": operation, "kind": kind, "done": [], "running": None, "failed": None,
            "complete": False, "abandoned": False, "rollback": None, "pending_reports": pending or [],
            "lldp_sent": lldp_sent, "rollback_point": rollback_point}


def check_operation(op):
    """The operation as ztpd sent it, checked enough to act on safely."""
    if not isinstance(op, dict) or not isinstance(op.get("id"), str) or not op["id"]:
        raise Exit(EXIT_TRANSIENT, "ztpd sent an operation without an id")
    steps = op.get("steps")
    if not isinstance(steps, list):
        raise Exit(EXIT_TRANSIENT, "operation %s has no steps list" % op["id"])
    seen = set()
    for s in steps:
        if not isinstance(s, dict) or not isinstance(s.get("name"), str) or not s["name"] or s["name"] in seen:
            raise Exit(EXIT_TRANSIENT, "operation %s has a step without a unique name" % op["id"])
        seen.add(s["name"])
        args = s.get("args") or {}
        if not isinstance(args, dict):
            raise Exit(EXIT_TRANSIENT, "operation %s step %s: args is not an object" % (op["id"], s["name"]))
        s["args"] = {str(k): v if isinstance(v, str) else json.dumps(v) for k, v in args.items()}
        s["action"] = str(s.get("action", ""))
    return op


class Agent:
    def __init__(self, cfg):
        self.cfg = cfg
        self.client = Client(cfg)
        self.state_dir = rooted(cfg["state_dir"])
        self.state_path = os.path.join(self.state_dir, "state.json")
        self.boot_id = read_boot_id()
        self.offline = False  # a delivery failed this run: queue the rest
        self.poll_seconds = cfg["interval"]
        self.state = None
        self.lock_fd = None
        self.run_noted = False  # the lock file says what this run does

    def lock(self):
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        self.lock_fd = os.open(os.path.join(self.state_dir, "lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.lock_fd)
            self.lock_fd = None
            raise Exit(EXIT_OK, "another ztpd-agent run is in progress" + describe_run(run_in_progress(self.state_dir)))
        if os.fstat(self.lock_fd).st_size:
            # A run killed while it polled on left its note.
            os.ftruncate(self.lock_fd, 0)

    def note_run(self, record):
        """Says in the lock file what this run is doing (a run that polls on
        holds the lock for long): `status` and a run that finds the lock
        taken show it. Not synced: it means nothing after a reboot."""
        record = dict(record, pid=os.getpid(), boot_id=self.boot_id)
        os.ftruncate(self.lock_fd, 0)
        os.pwrite(self.lock_fd, json.dumps(record).encode(), 0)
        self.run_noted = True

    def unlock(self):
        if self.lock_fd is not None:
            if self.run_noted:
                try:
                    os.ftruncate(self.lock_fd, 0)
                except OSError:
                    pass
            os.close(self.lock_fd)
            self.lock_fd = None

    def load(self):
        try:
            with open(self.state_path) as f:
                st = json.load(f)
            if not isinstance(st, dict):
                raise ValueError("not an object")
        except FileNotFoundError:
            st = {}
        except (OSError, ValueError) as e:
            log("state file unreadable (%s); starting afresh" % e)
            st = {}
        base = fresh_state()
        base.update(st)
        self.state = base

    def save(self):
        write_atomic(self.state_path, (json.dumps(self.state, indent=1) + "\n").encode(), 0o600)

    def queue_report(self, step, state, exit_code=0, output=""):
        pending = self.state["pending_reports"]
        pending.append({"operation": self.state["operation"], "step": step, "state": state, "exit_code": exit_code,
                        "output": output, "boot_id": self.boot_id, "agent_version": AGENT_VERSION})
        if len(pending) > MAX_PENDING:
            log("dropping %d undelivered reports (more than %d)" % (len(pending) - MAX_PENDING, MAX_PENDING))
            del pending[:-MAX_PENDING]

    def flush(self):
        """Delivers pending reports in order. Returns False when ztpd answered
        409 for the current operation (it is abandoned)."""
        pending = self.state["pending_reports"]
        current = True
        while pending and not self.offline:
            r = pending[0]
            try:
                status, doc = self.client.call("/report", r)
            except Unreachable as e:
                log("report %s/%s %s kept for later: %s" % (r["operation"], r["step"], r["state"], e))
                self.offline = True
                break
            pending.pop(0)
            if status == 409:
                log("operation %s is no longer current (409); stopping it" % r["operation"])
                pending[:] = [p for p in pending if p["operation"] != r["operation"]]
                if r["operation"] == self.state["operation"]:
                    self.state.update(fresh_state(r["operation"], self.state["kind"], pending,
                                                  self.state.get("lldp_sent"), self.state.get("rollback_point")))
                    self.state["abandoned"] = True
                    current = False
            elif not 200 <= status < 300:
                log("report %s/%s dropped: HTTP %d: %s" % (r["operation"], r["step"], status, doc))
            else:
                log("reported %s %s" % (r["step"], r["state"]))
            self.save()
        return current

    def report(self, step, state, exit_code=0, output=""):
        """Records the report durably with whatever state change preceded it, then tries to deliver."""
        self.queue_report(step, state, exit_code, output)
        self.save()
        return self.flush()

    def once(self, started, linger):
        """One run: a poll, then (linger) more while ztpd asks for them.
        The run lock is held throughout, so a concurrent run exits."""
        self.lock()
        code = self.attempt()
        if linger:
            code = self.linger(started, code)
        return code

    def attempt(self):
        """A poll; a transient failure is logged and is its exit code."""
        try:
            self.offline = False
            self.load()
            return self.poll()
        except Exit as e:
            if e.code != EXIT_TRANSIENT:
                raise
            log(str(e))
        except Unreachable as e:
            log(str(e))
        return EXIT_TRANSIENT

    def linger(self, started, code):
        """While ztpd's poll_seconds is shorter than the configured interval
        (a rollout includes this device), polls every poll_seconds (plus up
        to a tenth), past the interval: an operation handed out meanwhile
        starts within seconds, not at the timer's next tick. systemd merges
        a tick that falls within the run into it and counts the next from
        that tick (so after a long run the next comes at once); the lock
        keeps any other run out. Ends when ztpd asks for the normal interval
        again, at a reboot step, after linger_max seconds of the run, or
        after LINGER_FAILURES failed polls in a row (spaced by the interval,
        the timer's pace). Returns the last poll's exit code."""
        interval = self.cfg["interval"]
        deadline = started + self.cfg["linger_max"]
        failures = 0 if code == EXIT_OK else 1
        noted = None
        why = "ztpd asks for the %ds interval again" % interval
        while self.poll_seconds < interval:
            if self.rebooting():
                why = "the device is rebooting"
                break
            if failures >= LINGER_FAILURES:
                why = "%d polls in a row failed; the timer retries" % failures
                break
            every = interval if failures else self.poll_seconds
            wait = every + random.uniform(0, every / 10)
            if time.monotonic() + wait > deadline:
                why = "the run has polled on for its most (%ds); the timer's next run goes on" % self.cfg["linger_max"]
                break
            if noted != self.poll_seconds:
                until = time.time() + deadline - time.monotonic()
                log("ztpd asks for a poll every %ds (a rollout includes this device): polling on while it does, "
                    "until %s at the latest" % (self.poll_seconds, utc(until)))
                self.note_run({"polling_every": self.poll_seconds, "since": int(time.time()), "until": int(until)})
                noted = self.poll_seconds
            time.sleep(wait)
            code = self.attempt()
            failures = failures + 1 if code == EXIT_TRANSIENT else 0
        if noted is not None:
            log("polling on ended: " + why)
        return code

    def rebooting(self):
        running = self.state and self.state.get("running")
        return bool(running and running.get("rebooting"))

    def report_neighbors(self):
        """Sends the LLDP neighbours when they changed since ztpd last took them."""
        doc = lldp_json()
        ns = lldp_neighbors(doc) if doc is not None else []
        if not ns or ns == self.state.get("lldp_sent"):
            return
        status, answer = self.client.call("/neighbors", {"lldp_neighbors": ns})
        if status != 200:
            log("LLDP neighbours not taken: HTTP %d: %s" % (status, error_message(json.dumps(answer).encode())))
            return
        log("LLDP neighbours reported: " + ", ".join("%s -> %s %s" % (n["port"], n["remote_system"], n["remote_port"]) for n in ns))
        self.state["lldp_sent"] = ns
        self.save()

    def poll(self):
        if self.state["pending_reports"]:
            self.flush()
            if self.offline:
                return EXIT_TRANSIENT
        self.report_neighbors()
        status, desired = self.client.call("/desired")
        if status != 200 or not isinstance(desired, dict):
            raise Exit(EXIT_TRANSIENT, "GET desired: HTTP %d: %s" % (status, desired))
        if isinstance(desired.get("poll_seconds"), int) and desired["poll_seconds"] > 0:
            self.poll_seconds = desired["poll_seconds"]
        op = desired.get("operation")
        st = self.state
        if not op:
            if st["operation"] and not (st["complete"] or st["failed"] or st["abandoned"]):
                log("operation %s withdrawn by ztpd; forgetting it" % st["operation"])
                self.state = fresh_state(pending=st["pending_reports"], lldp_sent=st.get("lldp_sent"),
                                         rollback_point=st.get("rollback_point"))
                self.save()
            else:
                log("no operation (generation %s)" % desired.get("generation"))
            return EXIT_OK
        op = check_operation(op)
        if op["id"] != st["operation"]:
            log("new operation %s (%s, %d steps)" % (op["id"], op.get("kind"), len(op["steps"])))
            self.state = st = fresh_state(op["id"], op.get("kind"), st["pending_reports"], st.get("lldp_sent"),
                                          st.get("rollback_point"))
            self.save()
        rb = on_failure_rollback(op)
        if st["failed"] and rb and st["rollback"] not in ("succeeded", "failed") and not st["abandoned"]:
            # Killed after the failure was recorded: the rollback goes on.
            self.run_rollback(op, rb)
        else:
            for flag in ("complete", "failed", "abandoned"):
                if st[flag]:
                    log("operation %s is %s; nothing to do" % (op["id"], flag))
                    return EXIT_OK
            self.run_operation(op)
        if self.state["pending_reports"]:
            log("%d reports kept for the next run" % len(self.state["pending_reports"]))
            return EXIT_TRANSIENT
        return EXIT_OK

    def run_operation(self, op):
        st = self.state
        rb = on_failure_rollback(op)
        for step in op["steps"]:
            name, action = step["name"], step["action"]
            if name in st["done"] or step is rb:
                continue
            if action == "rollback":
                if not self.run_rollback(op, step):
                    return
                continue
            running = st["running"]
            if running and running.get("step") == name:
                if action == "reboot" and self.boot_id and running.get("boot_id") != self.boot_id:
                    log("step %s: rebooted (boot id changed)" % name)
                    if not self.finish(name, 0, "rebooted: boot id %s -> %s\n" % (running.get("boot_id"), self.boot_id)):
                        return
                    continue
                if action == "reboot" and running.get("rebooting"):
                    if time.time() - running.get("started", 0) < arg_timeout_or(step["args"], 3600):
                        log("step %s: waiting for the reboot" % name)
                        return
                    self.finish(name, AGENT_FAILED, "no reboot happened within the timeout (boot id unchanged)\n")
                    return
                log("step %s was interrupted; running it again" % name)
            st["running"] = {"step": name, "boot_id": self.boot_id, "started": int(time.time())}
            log("step %s (%s): running" % (name, action))
            if not self.report(name, "running"):
                return
            out = Tail()
            code = exit_code_of(name, out, self.run_action, op, step, out)
            if code is REBOOTING:
                return
            if not self.finish(name, code, out.text()) or code != 0:
                if code != 0 and rb and not st["abandoned"]:
                    self.run_rollback(op, rb)
                return
        st["complete"] = True
        self.save()
        log("operation %s complete" % op["id"])

    def finish(self, name, code, output):
        st = self.state
        st["running"] = None
        if code == 0:
            st["done"].append(name)
            log("step %s: succeeded" % name)
        else:
            st["failed"] = {"step": name, "exit_code": code}
            log("step %s: failed (exit %d); stopping operation %s" % (name, code, st["operation"]))
        return self.report(name, "succeeded" if code == 0 else "failed", code, output)

    def run_action(self, op, step, out):
        """Runs step's action; returns its exit code, or REBOOTING once a
        reboot step has started the reboot."""
        name, action = step["name"], step["action"]
        if action == "reboot":
            # "timeout" bounds the wait for the new boot, not this command.
            code = run_command(["reboot"], 120, out)
            if code == 0:
                self.state["running"]["rebooting"] = True
                self.save()
                log("step %s: rebooting" % name)
                return REBOOTING
            return code
        if action in ACTIONS:
            return ACTIONS[action](self, op, step, step["args"], out)
        raise StepFailed("unknown action %s" % action)

    def run_rollback(self, op, step):
        """Runs (or resumes, after a kill or its own reboot) a rollback step:
        its phases are kept in the state file, so each runs to its end once.
        Returns True when the rollback succeeded."""
        st = self.state
        name = step["name"]
        running = st["running"]
        if running and running.get("step") == name:
            log("step %s: resuming the rollback at %s" % (name, running.get("phase")))
        else:
            reason = ""
            if st["failed"]:
                reason = "step %s failed (exit %d)" % (st["failed"]["step"], st["failed"]["exit_code"])
            st["running"] = running = {"step": name, "boot_id": self.boot_id, "started": int(time.time()),
                                       "phase": "start", "reason": reason, "transcript": ""}
            st["rollback"] = "running"
            log("step %s (rollback): running%s" % (name, ", after " + reason if reason else ""))
            if not self.report(name, "running"):
                return False
        out = Tail()
        out.write(running.get("transcript", ""))
        if running.get("phase") == "start" and running.get("reason"):
            out.write("ztpd-agent: rolling back: %s\n" % running["reason"])
        code = exit_code_of(name, out, rollback, self, op, step, running, out)
        if code is REBOOTING:
            return False
        st["running"] = None
        st["rollback"] = "succeeded" if code == 0 else "failed"
        if code == 0:
            if op.get("kind") == "rollback":
                st["done"].append(name)
            log("step %s: rolled back" % name)
        else:
            if op.get("kind") == "rollback":
                st["failed"] = {"step": name, "exit_code": code}
            log("step %s: rollback failed (exit %d)" % (name, code))
        self.report(name, "succeeded" if code == 0 else "failed", code, out.text())
        return code == 0


def on_failure_rollback(op):
    """The operation's automatic rollback step: one with action rollback in
    an operation that is not itself a rollback (None without)."""
    if op.get("kind") == "rollback":
        return None
    return next((s for s in op["steps"] if s["action"] == "rollback"), None)


# REBOOTING: a step or a rollback phase rebooted the device; the next boot
# resumes it.
REBOOTING = object()


def exit_code_of(name, out, fn, *args):
    """Runs fn(*args) for step name and returns what it returns (an exit
    code, or REBOOTING). A step the agent itself fails (StepFailed, or an
    OSError) exits AGENT_FAILED, the reason written to its output; an
    unreachable ztpd or download ends this run with the step still running,
    so the next run starts it again."""
    try:
        return fn(*args)
    except (StepFailed, OSError) as e:
        out.write("ztpd-agent: %s\n" % e)
        return AGENT_FAILED
    except Unreachable as e:
        raise Exit(EXIT_TRANSIENT, "step %s: %s" % (name, e))


def save_phase(agent, running, phase, out):
    """Moves a rollback to its next phase, durably, with its transcript so far."""
    running["phase"] = phase
    running["transcript"] = out.text()[-4096:]
    agent.save()


def rollback(agent, op, step, running, out):
    """Goes back to the agent's rollback point: the image (set as default,
    rebooted into) and config checkpoint recorded before an install, or the
    kubeadm, kubelet and kubelet config kept before a Kubernetes upgrade.
    An automatic rollback uses only a point its own operation recorded; a
    rollback operation uses the last one."""
    point = agent.state.get("rollback_point")
    if op.get("kind") != "rollback":
        if not point or point.get("operation") != op["id"]:
            out.write("ztpd-agent: nothing to roll back: the operation failed before it changed the image or Kubernetes\n")
            return 0
    elif not point:
        raise StepFailed("no rollback point: this device's agent recorded no image install or Kubernetes upgrade")
    if point.get("kind") == "image":
        return rollback_image(agent, step, point, running, out)
    if point.get("kind") == "kubernetes":
        return rollback_kubernetes(agent, point, running, out)
    raise StepFailed("unknown rollback point kind %r" % point.get("kind"))


def rollback_image(agent, step, point, running, out):
    timeout = arg_timeout(step["args"], 1800)
    prev = point["image"]
    if running["phase"] == "start":
        images = sonic_images(timeout, out)
        if images["current"] == prev:
            out.write("ztpd-agent: running the previous image %s already; no reboot\n" % prev)
            if images["next"] and images["next"] != prev:
                # A failed install may have made its image the next boot's.
                code = run_command(["sonic-installer", "set-default", prev], timeout, out)
                if code != 0:
                    return code
            save_phase(agent, running, "restore", out)
        else:
            if prev not in images["available"]:
                raise StepFailed("previous image %s is gone (installed: %s); not rebooting into nothing"
                                 % (prev, ", ".join(images["available"]) or "none"))
            code = run_command(["sonic-installer", "set-default", prev], timeout, out)
            if code != 0:
                return code
            running["boot_id"] = agent.boot_id
            running["rebooting"], running["reboot_issued"] = True, False
            save_phase(agent, running, "rebooting", out)
    if running["phase"] == "rebooting":
        same_boot = not agent.boot_id or running.get("boot_id") == agent.boot_id
        if same_boot and not running.get("reboot_issued"):
            # Saved before the reboot command: a kill in between reboots now.
            code = run_command(["reboot"], 120, out)
            if code != 0:
                running["rebooting"] = False
                return code
            running["reboot_issued"] = True
            agent.save()
            log("step %s: rebooting into %s" % (step["name"], prev))
            return REBOOTING
        if same_boot:
            if time.time() - running.get("started", 0) < arg_timeout_or(step["args"], 3600):
                log("step %s: waiting for the reboot into %s" % (step["name"], prev))
                return REBOOTING
            running["rebooting"] = False
            raise StepFailed("no reboot into %s happened within the timeout (boot id unchanged)" % prev)
        running["rebooting"] = False
        images = sonic_images(timeout, out)
        if images["current"] != prev:
            raise StepFailed("rebooted into %s, not the previous image %s" % (images["current"], prev))
        out.write("ztpd-agent: rebooted into %s (boot id %s -> %s)\n" % (prev, running.get("boot_id"), agent.boot_id))
        save_phase(agent, running, "restore", out)
    if running["phase"] == "restore":
        cfg = point.get("config") or {}
        if cfg.get("kind") == "checkpoint":
            code = run_command(["config", "rollback", cfg["name"]], timeout, out)
            if code != 0:
                return code
        elif cfg.get("kind") == "file":
            with open(cfg["path"], "rb") as f:
                write_atomic(rooted(SONIC_CONFIG_DB), f.read(), 0o644)
            out.write("ztpd-agent: restored %s from the copy taken before the install\n" % SONIC_CONFIG_DB)
            code = run_command(["config", "reload", "-y"], timeout, out)
            if code != 0:
                return code
        else:
            out.write("ztpd-agent: no config checkpoint was taken (no %s); config left as it is\n" % SONIC_CONFIG_DB)
        save_phase(agent, running, "done", out)
    out.write("ztpd-agent: rolled back to %s\n" % prev)
    return 0


def rollback_kubernetes(agent, point, running, out):
    if running["phase"] == "start":
        for dest, saved in sorted(point.get("files", {}).items()):
            with open(saved, "rb") as f:
                data = f.read()
            write_atomic(rooted(dest), data, point.get("modes", {}).get(dest, 0o644))
            out.write("ztpd-agent: restored %s\n" % dest)
        save_phase(agent, running, "restart", out)
    if running["phase"] == "restart":
        code = run_command(["systemctl", "restart", "kubelet"], 300, out)
        if code != 0:
            return code
        save_phase(agent, running, "done", out)
    out.write("ztpd-agent: kubelet and kubeadm are back at what they were before operation %s\n" % point["operation"])
    return 0


SONIC_CONFIG_DB = "/etc/sonic/config_db.json"


def sonic_images(timeout, out):
    """`sonic-installer list`: {"current", "next", "available": [...]}."""
    tail = Tail()
    code = run_command(["sonic-installer", "list"], timeout, tail)
    text = tail.text()
    out.write(text)
    if code != 0:
        raise StepFailed("sonic-installer list failed (exit %d)" % code)
    images = {"current": "", "next": "", "available": []}
    in_available = False
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("$ ") or not line:
            continue
        if line.startswith("Current:"):
            images["current"] = line.split(":", 1)[1].strip()
        elif line.startswith("Next:"):
            images["next"] = line.split(":", 1)[1].strip()
        elif line.startswith("Available:"):
            in_available = True
        elif in_available:
            images["available"].append(line)
    if not images["current"]:
        raise StepFailed("sonic-installer list names no current image")
    return images


def take_image_point(agent, op, timeout, out):
    """Before an install: the running image and a config checkpoint (SONiC's
    `config checkpoint` where the image has it, else a copy of
    config_db.json). Taken once per operation: an install resumed after a
    kill keeps the first (the running image has not changed before the
    reboot anyway)."""
    point = agent.state.get("rollback_point")
    if point and point.get("operation") == op["id"]:
        out.write("ztpd-agent: rollback point kept: image %s\n" % point["image"])
        return
    try:
        images = sonic_images(timeout, out)
    except StepFailed as e:
        if on_failure_rollback(op):
            # An automatic rollback needs the image to go back to: never
            # install without knowing it.
            raise StepFailed("%s: no rollback point, not installing" % e)
        # Without an automatic rollback the install goes on; a later
        # one-command rollback says there is nothing to go back to.
        out.write("ztpd-agent: %s: no rollback point taken\n" % e)
        agent.state["rollback_point"] = None
        agent.save()
        return
    name = "ztpd-" + re.sub(r"[^A-Za-z0-9_-]", "-", op["id"])
    cfg = {"kind": "none"}
    if run_command(["config", "checkpoint", name], timeout, out) == 0:
        cfg = {"kind": "checkpoint", "name": name}
    elif os.path.exists(rooted(SONIC_CONFIG_DB)):
        copy = os.path.join(agent.state_dir, "rollback", "config_db.json")
        with open(rooted(SONIC_CONFIG_DB), "rb") as f:
            write_atomic(copy, f.read(), 0o600)
        cfg = {"kind": "file", "path": copy}
        out.write("ztpd-agent: no config checkpoint on this image: copied %s\n" % SONIC_CONFIG_DB)
    agent.state["rollback_point"] = {"kind": "image", "operation": op["id"], "image": images["current"],
                                     "config": cfg, "taken": int(time.time())}
    agent.save()
    out.write("ztpd-agent: rollback point: image %s, config %s\n" % (images["current"], cfg.get("name", cfg["kind"])))


KUBE_FILES = ("/usr/local/bin/kubeadm", "/usr/local/bin/kubelet", "/var/lib/kubelet/config.yaml",
              "/var/lib/kubelet/kubeadm-flags.env")


def take_kubernetes_point(agent, op, out):
    """Before a Kubernetes upgrade: copies of kubeadm, kubelet and the
    kubelet's config as they are (once per operation)."""
    point = agent.state.get("rollback_point")
    if point and point.get("operation") == op["id"]:
        return
    saved, modes = {}, {}
    d = os.path.join(agent.state_dir, "rollback", "kubernetes")
    for path in KUBE_FILES:
        src = rooted(path)
        if not os.path.isfile(src):
            continue
        dest = os.path.join(d, path.strip("/").replace("/", "_"))
        with open(src, "rb") as f:
            write_atomic(dest, f.read(), 0o600)
        saved[path], modes[path] = dest, os.stat(src).st_mode & 0o777
    agent.state["rollback_point"] = {"kind": "kubernetes", "operation": op["id"], "files": saved, "modes": modes,
                                     "taken": int(time.time())}
    agent.save()
    out.write("ztpd-agent: rollback point: kept %s\n" % (", ".join(sorted(saved)) or "nothing (no binaries found)"))


def kubeadm_backups(out):
    """Names the backups kubeadm's own rollback of a control plane left
    (static pod manifests and etcd data under /etc/kubernetes/tmp)."""
    d = rooted("/etc/kubernetes/tmp")
    try:
        names = sorted(n for n in os.listdir(d) if n.startswith("kubeadm-backup-") or n.startswith("kubeadm-upgraded-"))
    except OSError:
        names = []
    if names:
        out.write("ztpd-agent: kubeadm's backups: %s\n" % ", ".join("/etc/kubernetes/tmp/" + n for n in names))
    else:
        out.write("ztpd-agent: kubeadm left no backups under /etc/kubernetes/tmp\n")


def arg_timeout_or(args, default):
    try:
        return arg_timeout(args, default)
    except StepFailed:
        return default


def utc(t):
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(t))


def run_in_progress(state_dir):
    """What the run holding the lock noted in it (a run polling on), or
    None: nothing noted, a dead process or another boot."""
    try:
        with open(os.path.join(state_dir, "lock")) as f:
            record = json.loads(f.read() or "null")
        pid = record["pid"]
        if record.get("boot_id") != read_boot_id():
            return None
        os.kill(pid, 0)
    except (OSError, ValueError, TypeError, KeyError):
        # PermissionError is an OSError too, but the agent runs as root.
        return None
    return record


def describe_run(record):
    if not record:
        return ""
    return (": pid %d, polling every %ds since %s while ztpd asks (a rollout includes this device), until %s at the latest"
            % (record["pid"], record.get("polling_every", 0), utc(record.get("since", 0)), utc(record.get("until", 0))))


def run_once(config_path, linger=False):
    """One run; returns the exit code and the agent."""
    started = time.monotonic()
    agent = None
    try:
        agent = Agent(load_config(config_path))
        code = agent.once(started, linger)
    except Exit as e:
        log(str(e))
        code = e.code
    except Unreachable as e:
        log(str(e))
        code = EXIT_TRANSIENT
    except KeyboardInterrupt:
        # A run by hand that polls on is ended with ^C; the state file
        # resumes whatever step it interrupted.
        log("interrupted")
        code = 130
    finally:
        if agent:
            agent.unlock()
    return code, agent


def cmd_run(config_path, count, interval):
    n = 0
    while True:
        code, agent = run_once(config_path)
        n += 1
        if code == EXIT_USAGE or (count and n >= count):
            return code
        wait = interval or (agent.poll_seconds if agent else 60)
        time.sleep(wait + random.uniform(0, wait / 2))


def cmd_status(config_path):
    try:
        cfg = load_config(config_path)
    except Exit as e:
        log(str(e))
        return e.code
    state_dir = rooted(cfg["state_dir"])
    try:
        with open(os.path.join(state_dir, "state.json")) as f:
            state = json.load(f)
    except FileNotFoundError:
        state = fresh_state()
    except (OSError, ValueError) as e:
        log("cannot read the state file: %s" % e)
        return EXIT_TRANSIENT
    if isinstance(state, dict):
        # The run polling on now, if one is (what `once` would wait for).
        state["run_in_progress"] = run_in_progress(state_dir)
    print(json.dumps(state, indent=2, sort_keys=True))
    return EXIT_OK


def main(argv):
    p = argparse.ArgumentParser(prog="ztpd-agent", description="ztpd device agent (day-2 operations)",
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog="""examples:
  ztpd-agent status              the state file, and a run polling on now (run_in_progress)
  ztpd-agent once                what the timer runs: polls on while ztpd asks (a rollout)
  ztpd-agent once --one-poll     a single poll, by hand""")
    p.add_argument("--config", default=CONFIG_PATH, help="agent configuration (default %(default)s)")
    sub = p.add_subparsers(dest="command")
    o = sub.add_parser("once", help="one run: deliver reports, fetch desired state, run the operation "
                       "(polling on while ztpd asks for faster polls)")
    o.add_argument("--one-poll", action="store_true", help="poll once, even while ztpd asks for faster polls")
    r = sub.add_parser("run", help="poll in a loop (foreground)")
    r.add_argument("--count", type=int, default=0, help="stop after this many polls (0: never)")
    r.add_argument("--interval", type=int, default=0, help="seconds between polls (default: from ztpd)")
    sub.add_parser("status", help="print the state file as JSON, with the run polling on now (run_in_progress)")
    args = p.parse_args(argv)
    if args.command == "once":
        return run_once(args.config, linger=not args.one_poll)[0]
    if args.command == "run":
        return cmd_run(args.config, args.count, args.interval)
    if args.command == "status":
        return cmd_status(args.config)
    p.print_usage(sys.stderr)
    return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
