package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/ztpd/ztpd/testenv/freeport"
)

// Regression: "ztpd backup" copied ztpd.db only; restored into a fresh
// directory, serve made a new secret.key, every API key failed with a
// generic 401, and images answered 503 showing devices the server's path.
// These tests run the real binary, with curl and tftp-hpa as the devices.

const backupPass = "correct horse battery staple"

// backupLab is a data directory served with a config whose reservation
// makes 127.0.0.42 a SONiC switch (an operator-declared binding), and a
// profile serving it ztp.json (no cluster).
type backupLab struct {
	dir, cfg string
}

func backupNewLab(t *testing.T) backupLab {
	t.Helper()
	for _, tool := range []string{"curl"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("needs %s on PATH", tool)
		}
	}
	dir := t.TempDir()
	prof := filepath.Join(dir, "profiles")
	os.MkdirAll(prof, 0o755)
	os.WriteFile(filepath.Join(prof, "switches.yaml"), []byte("name: backup-switches\nmatch:\n  kind: sonic\nhostname: 'sw-{{ .Serial | lower }}'\n"), 0o644)
	cfg := filepath.Join(dir, "ztpd.yaml")
	os.WriteFile(cfg, []byte(fmt.Sprintf(`dhcp:
  subnets:
    - name: lo
      subnet: 127.0.0.0/8
      reservations:
        - {mac: "02:00:00:00:00:42", ip: 127.0.0.42, serial: "SN42", kind: sonic}
profiles: [%s]
`, prof)), 0o644)
	return backupLab{dir: dir, cfg: cfg}
}

// backupRun runs the real binary (stdin not a terminal) with the backup
// passphrase in the environment unless env says otherwise.
func backupRun(t *testing.T, env []string, args ...string) (string, string, error) {
	t.Helper()
	cmd := exec.Command(buildZtpd(t), args...)
	cmd.Env = append(os.Environ(), "ZTPD_BACKUP_PASSPHRASE="+backupPass, "ZTPD_API_KEY=", "ZTPD_SECRET_KEY=", "ZTPD_API_URL=")
	cmd.Env = append(cmd.Env, env...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	return out.String(), errb.String(), err
}

func backupMust(t *testing.T, env []string, args ...string) string {
	t.Helper()
	out, stderr, err := backupRun(t, env, args...)
	if err != nil {
		t.Fatalf("ztpd %s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return out
}

// backupCurl fetches url from the reserved device address.
func backupCurl(t *testing.T, url string) (int, []byte) {
	t.Helper()
	out, err := exec.Command("curl", "-s", "--interface", "127.0.0.42", "-m", "10", "-w", "\n%{http_code}", url).Output()
	if err != nil {
		t.Fatalf("curl %s: %v", url, err)
	}
	i := bytes.LastIndexByte(out, '\n')
	var code int
	fmt.Sscan(string(out[i+1:]), &code)
	return code, out[:i]
}

func backupStop(t *testing.T, s *runningServer) {
	t.Helper()
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- s.cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		t.Fatal("server did not stop")
	}
}

// backupTree is every file under dir with its content hash.
func backupTree(t *testing.T, dir string) string {
	t.Helper()
	var lines []string
	filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		rel, _ := filepath.Rel(dir, path)
		if d.Type()&fs.ModeSocket != 0 || d.IsDir() {
			lines = append(lines, rel+"/")
			return nil
		}
		b, _ := os.ReadFile(path)
		s := sha256.Sum256(b)
		lines = append(lines, rel+" "+hex.EncodeToString(s[:]))
		return nil
	})
	sort.Strings(lines)
	return strings.Join(lines, "\n")
}

type backupKey struct {
	APIKey    string `json:"api_key"`
	SecretKey string `json:"secret_key"`
}

type backupState struct {
	lab                   backupLab
	data                  string
	key                   backupKey
	fingerprint           string
	full, noKey, noImages string // archives
	ztpJSON               []byte // with the server's address as SERVER
	image                 []byte
	imageSHA              string
}

// backupMakeServer runs a server with a device that fetched its ztp.json,
// an API key and an image, and backs it up three ways while it serves.
func backupMakeServer(t *testing.T) backupState {
	t.Helper()
	bin := buildZtpd(t)
	st := backupState{lab: backupNewLab(t)}
	st.data = filepath.Join(st.lab.dir, "data")
	s := startServe(t, bin, st.data, "--config", st.lab.cfg)
	st.image = bytes.Repeat([]byte("sonic installer image "), 50000)
	sum := sha256.Sum256(st.image)
	st.imageSHA = hex.EncodeToString(sum[:])
	img := filepath.Join(st.lab.dir, "sonic.bin")
	os.WriteFile(img, st.image, 0o644)
	backupMust(t, nil, "--data-dir", st.data, "image", "add", img, "--kind", "sonic-installer")
	out := backupMust(t, nil, "--data-dir", st.data, "apikey", "create", "--name", "ops", "--role", "admin", "-o", "json")
	if err := json.Unmarshal([]byte(out), &st.key); err != nil || st.key.SecretKey == "" {
		t.Fatalf("apikey create: %v %s", err, out)
	}
	code, body := backupCurl(t, "http://"+s.addr+"/ztp/ztp.json")
	if code != 200 || !bytes.Contains(body, []byte("config_db.json")) {
		t.Fatalf("ztp.json before the backup: %d %s", code, body)
	}
	st.ztpJSON = bytes.ReplaceAll(body, []byte(s.addr), []byte("SERVER"))

	for _, b := range []struct {
		file *string
		name string
		args []string
	}{
		{&st.full, "full.ztpdbak", []string{"--with-key", "--with-images"}},
		{&st.noKey, "nokey.ztpdbak", []string{"--with-images"}},
		{&st.noImages, "noimages.ztpdbak", []string{"--with-key"}},
	} {
		*b.file = filepath.Join(st.lab.dir, b.name)
		args := append([]string{"--data-dir", st.data, "backup", *b.file, "-o", "json"}, b.args...)
		var res struct {
			File        string `json:"file"`
			Bytes       int64  `json:"bytes"`
			KeyIncluded bool   `json:"key_included"`
			Fingerprint string `json:"key_fingerprint"`
			ImageBlobs  int    `json:"image_blobs"`
		}
		out := backupMust(t, nil, args...)
		if err := json.Unmarshal([]byte(out), &res); err != nil || res.File != *b.file || res.Bytes == 0 || len(res.Fingerprint) != 64 {
			t.Fatalf("backup %v: %v %s", b.args, err, out)
		}
		st.fingerprint = res.Fingerprint
		if fi, err := os.Stat(*b.file); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("archive mode: %v %v", fi, err)
		}
		raw, _ := os.ReadFile(*b.file)
		if bytes.Contains(raw, []byte("sonic installer image sonic")) || bytes.Contains(raw, []byte(st.key.APIKey)) {
			t.Fatal("the archive is not encrypted")
		}
	}
	backupStop(t, s)
	return st
}

// TestBackupRestoreIntoFreshDirectory: the whole appliance comes back in a
// new directory from one archive: the restored server serves the device
// its ztp.json (curl from the device's address), the image, and the API key
// made before the backup still signs requests.
func TestBackupRestoreIntoFreshDirectory(t *testing.T) {
	st := backupMakeServer(t)
	fresh := filepath.Join(t.TempDir(), "restored")
	out := backupMust(t, nil, "restore", st.full, "--data-dir", fresh)
	for _, want := range []string{"restored store", "restored at " + filepath.Join(fresh, "secret.key"), st.fingerprint, "1 restored"} {
		if !strings.Contains(out, want) {
			t.Fatalf("restore output lacks %q:\n%s", want, out)
		}
	}
	s := startServe(t, buildZtpd(t), fresh, "--config", st.lab.cfg)
	code, body := backupCurl(t, "http://"+s.addr+"/ztp/ztp.json")
	if code != 200 || !bytes.Equal(bytes.ReplaceAll(body, []byte(s.addr), []byte("SERVER")), st.ztpJSON) {
		t.Fatalf("ztp.json after the restore: %d %s\nbefore: %s", code, body, st.ztpJSON)
	}
	code, img := backupCurl(t, "http://"+s.addr+"/images/sonic.bin")
	if sum := sha256.Sum256(img); code != 200 || hex.EncodeToString(sum[:]) != st.imageSHA {
		t.Fatalf("image after the restore: %d, %d bytes", code, len(img))
	}
	api := []string{"--api-url", "http://" + s.addr, "--api-key", st.key.APIKey}
	out = backupMust(t, nil, append([]string{"device", "list", "-o", "json", "--secret-key", st.key.SecretKey}, api...)...)
	if !strings.Contains(out, "SN42") {
		t.Fatalf("signed device list after the restore lacks the device:\n%s", out)
	}
	backupMust(t, nil, append([]string{"kube-version", "list", "--secret-key", st.key.SecretKey}, api...)...)
	// The signature is really checked: a wrong secret is refused.
	if _, stderr, err := backupRun(t, nil, append([]string{"kube-version", "list", "--secret-key", strings.Repeat("x", 43)}, api...)...); err == nil {
		t.Fatal("a wrong secret was accepted")
	} else if !strings.Contains(stderr, "401") && !strings.Contains(stderr, "credentials") {
		t.Fatalf("wrong secret: %s", stderr)
	}
	backupStop(t, s)
	if strings.Contains(s.stderr.String(), "images without their content") || strings.Contains(s.stderr.String(), "at-rest key created") {
		t.Fatalf("restored server warned or made a key:\n%s", s.stderr)
	}
	// A backup of the restored server, taken offline, verifies.
	again := filepath.Join(t.TempDir(), "again.ztpdbak")
	backupMust(t, nil, "--data-dir", fresh, "backup", again)
	out = backupMust(t, nil, "restore", "--verify-only", again)
	if !strings.Contains(out, "complete and authentic") || !strings.Contains(out, st.fingerprint) {
		t.Fatalf("verify-only:\n%s", out)
	}
}

// TestBackupRestoreWithoutKey: an archive without the key restores only
// where that key already is; elsewhere it is refused with the fingerprint
// needed and where it is expected, and nothing is written.
func TestBackupRestoreWithoutKey(t *testing.T) {
	st := backupMakeServer(t)
	fresh := filepath.Join(t.TempDir(), "restored")
	_, stderr, err := backupRun(t, nil, "restore", st.noKey, "--data-dir", fresh)
	keyPath := filepath.Join(fresh, "secret.key")
	if err == nil || !strings.Contains(stderr, st.fingerprint) || !strings.Contains(stderr, keyPath) || !strings.Contains(stderr, "--with-key") {
		t.Fatalf("restore without a key: %v\n%s", err, stderr)
	}
	if _, err := os.Stat(fresh); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("the refused restore created the data directory")
	}
	// With the old server's key put in place first, it restores and serves.
	os.MkdirAll(fresh, 0o700)
	orig, _ := os.ReadFile(filepath.Join(st.data, "secret.key"))
	os.WriteFile(keyPath, orig, 0o600)
	out := backupMust(t, nil, "restore", st.noKey, "--data-dir", fresh)
	if !strings.Contains(out, "present at "+keyPath) {
		t.Fatalf("restore with the key in place:\n%s", out)
	}
	s := startServe(t, buildZtpd(t), fresh, "--config", st.lab.cfg)
	backupMust(t, nil, "kube-version", "list", "--api-url", "http://"+s.addr, "--api-key", st.key.APIKey, "--secret-key", st.key.SecretKey)
}

// TestBackupServeRefusesWithoutItsKey: a store holding sealed secrets whose
// secret.key was deleted (or replaced) is not served with a new key: serve
// (and any command opening the store) refuses, naming the fingerprint.
func TestBackupServeRefusesWithoutItsKey(t *testing.T) {
	st := backupMakeServer(t)
	keyPath := filepath.Join(st.data, "secret.key")
	orig, _ := os.ReadFile(keyPath)
	os.Remove(keyPath)
	out, stderr, err := backupRun(t, nil, "serve", "--config", st.lab.cfg, "--data-dir", st.data, "--http-addr", freeport.Addr(t))
	if err == nil || !strings.Contains(stderr, "at-rest key missing") || !strings.Contains(stderr, st.fingerprint) || !strings.Contains(stderr, keyPath) {
		t.Fatalf("serve without its key: %v\n%s%s", err, out, stderr)
	}
	if _, err := os.Stat(keyPath); !errors.Is(err, fs.ErrNotExist) {
		t.Fatal("serve created a new key under sealed data")
	}
	if _, stderr, err := backupRun(t, nil, "--data-dir", st.data, "image", "list"); err == nil || !strings.Contains(stderr, st.fingerprint) {
		t.Fatalf("image list without the key: %v %s", err, stderr)
	}
	// Another key: refused as a mismatch, and left alone.
	other := bytes.Repeat([]byte{0x5a}, 32)
	os.WriteFile(keyPath, other, 0o600)
	_, stderr, err = backupRun(t, nil, "serve", "--config", st.lab.cfg, "--data-dir", st.data, "--http-addr", freeport.Addr(t))
	if err == nil || !strings.Contains(stderr, "at-rest key mismatch") || !strings.Contains(stderr, st.fingerprint) {
		t.Fatalf("serve with another key: %v\n%s", err, stderr)
	}
	if now, _ := os.ReadFile(keyPath); !bytes.Equal(now, other) {
		t.Fatal("the other key was changed")
	}
	os.WriteFile(keyPath, orig, 0o600)
	s := startServe(t, buildZtpd(t), st.data, "--config", st.lab.cfg)
	backupMust(t, nil, "kube-version", "list", "--api-url", "http://"+s.addr, "--api-key", st.key.APIKey, "--secret-key", st.key.SecretKey)
}

// TestBackupRestoreRefusals: a wrong passphrase, a tampered archive and an
// existing store without --force are refused and change nothing; a
// passphrase only ever comes from a file, the environment or a terminal.
func TestBackupRestoreRefusals(t *testing.T) {
	st := backupMakeServer(t)
	target := filepath.Join(t.TempDir(), "target")
	backupMust(t, nil, "restore", st.full, "--data-dir", target)
	before := backupTree(t, target)

	_, stderr, err := backupRun(t, nil, "restore", st.full, "--data-dir", target)
	if err == nil || !strings.Contains(stderr, "already holds a store") || !strings.Contains(stderr, "--force") {
		t.Fatalf("restore over a store: %v %s", err, stderr)
	}
	_, stderr, err = backupRun(t, []string{"ZTPD_BACKUP_PASSPHRASE=not the passphrase"}, "restore", st.full, "--data-dir", target, "--force")
	if err == nil || !strings.Contains(stderr, "wrong passphrase") {
		t.Fatalf("wrong passphrase: %v %s", err, stderr)
	}
	raw, _ := os.ReadFile(st.full)
	for name, tamper := range map[string]func([]byte) []byte{
		"byte flipped": func(b []byte) []byte { b[len(b)/2] ^= 1; return b },
		"cut short":    func(b []byte) []byte { return b[:len(b)-100] },
	} {
		bad := filepath.Join(t.TempDir(), "bad.ztpdbak")
		os.WriteFile(bad, tamper(bytes.Clone(raw)), 0o600)
		_, stderr, err := backupRun(t, nil, "restore", bad, "--data-dir", target, "--force")
		if err == nil || !strings.Contains(stderr, "damaged or was tampered with") {
			t.Fatalf("%s: %v %s", name, err, stderr)
		}
	}
	if after := backupTree(t, target); after != before {
		t.Fatalf("refused restores changed the data directory:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	// --force keeps the old store beside the new one.
	out := backupMust(t, nil, "restore", st.full, "--data-dir", target, "--force")
	if !regexp.MustCompile(`previous store kept as\s+\S+ztpd\.db\.before-restore-\d{8}T\d{6}Z`).MatchString(out) {
		t.Fatalf("forced restore:\n%s", out)
	}
	// A running server's directory is refused.
	s := startServe(t, buildZtpd(t), target, "--config", st.lab.cfg)
	_, stderr, err = backupRun(t, nil, "restore", st.full, "--data-dir", target, "--force")
	if err == nil || !strings.Contains(stderr, "server is running") {
		t.Fatalf("restore under a running server: %v %s", err, stderr)
	}
	backupStop(t, s)

	// Passphrases: never empty or short for a backup, never a flag.
	noPass := []string{"ZTPD_BACKUP_PASSPHRASE="}
	_, stderr, err = backupRun(t, noPass, "--data-dir", target, "backup", filepath.Join(t.TempDir(), "x.ztpdbak"))
	if err == nil || !strings.Contains(stderr, "--passphrase-file") || !strings.Contains(stderr, "ZTPD_BACKUP_PASSPHRASE") {
		t.Fatalf("backup without a passphrase: %v %s", err, stderr)
	}
	_, stderr, err = backupRun(t, []string{"ZTPD_BACKUP_PASSPHRASE=short"}, "--data-dir", target, "backup", filepath.Join(t.TempDir(), "x.ztpdbak"))
	if err == nil || !strings.Contains(stderr, "at least") {
		t.Fatalf("short passphrase: %v %s", err, stderr)
	}
	passFile := filepath.Join(t.TempDir(), "pass")
	os.WriteFile(passFile, []byte(backupPass+"\n"), 0o600)
	out = backupMust(t, noPass, "restore", "--verify-only", st.full, "--passphrase-file", passFile)
	if !strings.Contains(out, "complete and authentic") {
		t.Fatalf("verify with a passphrase file:\n%s", out)
	}
}

// TestBackupMissingImageContent: restored without the image blobs, the
// server says at start which images have no content, and a device asking
// for one gets a 503 over HTTP and an error over TFTP (tftp-hpa) that name
// the image but not the server's path; the path is in the log at error.
func TestBackupMissingImageContent(t *testing.T) {
	if _, err := exec.LookPath("tftp"); err != nil {
		t.Skip("needs tftp (tftp-hpa) on PATH")
	}
	st := backupMakeServer(t)
	fresh := filepath.Join(t.TempDir(), "restored")
	_, stderr, err := backupRun(t, nil, "restore", st.noImages, "--data-dir", fresh)
	if err != nil || !strings.Contains(stderr, "image sonic.bin has no content here") {
		t.Fatalf("restore without blobs: %v\n%s", err, stderr)
	}
	tftpAddr := freeport.Addr(t) // a free TCP port number; the UDP one is almost surely free too
	s := startServe(t, buildZtpd(t), fresh, "--config", st.lab.cfg, "--tftp", "--tftp-addr", tftpAddr)
	blob := filepath.Join(fresh, "images", "sha256", st.imageSHA)

	code, body := backupCurl(t, "http://"+s.addr+"/images/sonic.bin")
	if code != 503 || bytes.Contains(body, []byte(fresh)) || bytes.Contains(body, []byte("/images/")) {
		t.Fatalf("HTTP image without content: %d %s", code, body)
	}
	host, port, _ := strings.Cut(tftpAddr, ":")
	out, _ := exec.Command("tftp", "-m", "binary", host, port, "-c", "get", "images/sonic.bin", filepath.Join(t.TempDir(), "got")).CombinedOutput()
	if !strings.Contains(string(out), "sonic.bin is not available") || strings.Contains(string(out), "/") {
		t.Fatalf("TFTP image without content: %q", out)
	}
	backupStop(t, s)
	log := s.stderr.String()
	if !strings.Contains(log, "images without their content") || !strings.Contains(log, "count=1") || !strings.Contains(log, "first=sonic.bin") {
		t.Fatalf("no start warning about the image without content:\n%s", log)
	}
	var logged bool
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "level=ERROR") && strings.Contains(line, "tftp request refused") && strings.Contains(line, blob) {
			logged = true
		}
	}
	if !logged {
		t.Fatalf("the blob's path is not in an error line of the log:\n%s", log)
	}
}
