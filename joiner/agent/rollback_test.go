package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const (
	oldImage = "SONiC-OS-202305.1"
	newImage = "SONiC-OS-202411.2"
)

// sonicRig is a rig whose sonic-installer, reboot and config keep a
// switch's state as SONiC's do: install adds the image and makes it the
// next boot's, set-default picks another installed one, reboot (once the
// test calls boot) makes the next image current with a new boot id. Every
// call is recorded; a fake whose argv starts with the text in kill-on
// kills the agent (SIGKILL, as a power loss) the first time it runs.
type sonicRig struct {
	*rig
	sw    string
	boots int
}

func newSonicRig(t *testing.T) *sonicRig {
	r := &sonicRig{rig: newRig(t), boots: 1}
	r.sw = filepath.Join(filepath.Dir(r.bin), "sonic")
	os.MkdirAll(r.sw, 0o755)
	r.setImages(oldImage, oldImage, oldImage, "SONiC-OS-202205.9")
	// kill-skip counts matching calls to let run before the kill.
	kill := `
if [ -f ` + r.bin + `/kill-on ] && case "$NAME $*" in "$(cat ` + r.bin + `/kill-on)"*) true;; *) false;; esac; then
  skip=$(cat ` + r.bin + `/kill-skip 2>/dev/null || echo 0)
  if [ "$skip" -gt 0 ]; then echo $((skip - 1)) > ` + r.bin + `/kill-skip
  else rm -f ` + r.bin + `/kill-on; echo "killed the agent in: $NAME $*" >> ` + r.calls + `; kill -9 $PPID; exit 137
  fi
fi`
	fake := func(name, body string) {
		script := "#!/bin/sh\nNAME=" + name + "\nS=" + r.sw + kill + "\necho \"" + name + " $*\" >> " + r.calls + "\n" + body + "\n"
		if err := os.WriteFile(filepath.Join(r.bin, name), []byte(script), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	fake("sonic-installer", `case "$1" in
list) echo "Current: $(cat $S/current)"; echo "Next: $(cat $S/next)"; echo "Available:"; cat $S/available;;
install) grep -qx `+newImage+` $S/available || echo `+newImage+` >> $S/available; echo `+newImage+` > $S/next; echo "Installed `+newImage+`";;
set-default) grep -qx "$2" $S/available || { echo "Image $2 is not installed" >&2; exit 1; }; echo "$2" > $S/next;;
*) exit 2;;
esac
exit $(cat $S/installer.exit 2>/dev/null || echo 0)`)
	fake("reboot", `touch $S/reboot-pending`)
	fake("config", `case "$1" in
checkpoint) exit $(cat $S/checkpoint.exit 2>/dev/null || echo 0);;
esac
exit 0`)
	return r
}

func (r *sonicRig) setImages(current, next string, available ...string) {
	os.WriteFile(filepath.Join(r.sw, "current"), []byte(current+"\n"), 0o644)
	os.WriteFile(filepath.Join(r.sw, "next"), []byte(next+"\n"), 0o644)
	os.WriteFile(filepath.Join(r.sw, "available"), []byte(strings.Join(available, "\n")+"\n"), 0o644)
}

func (r *sonicRig) read(name string) string {
	b, _ := os.ReadFile(filepath.Join(r.sw, name))
	return strings.TrimSpace(string(b))
}

// boot is the reboot the fake reboot asked for: the next image runs, with
// a new boot id.
func (r *sonicRig) boot() {
	r.t.Helper()
	if _, err := os.Stat(filepath.Join(r.sw, "reboot-pending")); err != nil {
		r.t.Fatalf("boot without a reboot asked for")
	}
	os.Remove(filepath.Join(r.sw, "reboot-pending"))
	os.WriteFile(filepath.Join(r.sw, "current"), []byte(r.read("next")+"\n"), 0o644)
	r.boots++
	r.setBootID(fmt.Sprintf("boot-%d", r.boots))
}

// killOn kills the agent in the call starting with prefix, after skip
// such calls ran.
func (r *sonicRig) killOn(prefix string, skip int) {
	os.WriteFile(filepath.Join(r.bin, "kill-on"), []byte(prefix), 0o644)
	os.WriteFile(filepath.Join(r.bin, "kill-skip"), []byte(fmt.Sprint(skip)), 0o644)
}

// imageUpgrade offers a standalone switch's image upgrade with its
// automatic rollback step: install, reboot, post_upgrade hook, rollback.
func (r *sonicRig) imageUpgrade(id, hookBody string) {
	image := []byte("sonic image bytes")
	r.ztpd.set(func(f *fakeZTPD) { f.files["sonic.bin"] = image })
	url, sum := r.hook("post", r.recordLine("hook $ZTPD_STEP")+"\n"+hookBody)
	r.offer(id, "upgrade-image",
		step("install", "sonic-install", map[string]string{"url": r.ztpd.srv.URL + "/files/sonic.bin"}),
		step("reboot", "reboot", nil),
		step("post_upgrade", "hook", map[string]string{"url": url, "sha256": sum}),
		step("rollback", "rollback", nil))
}

func lastReport(t *testing.T, reps []report) report {
	t.Helper()
	if len(reps) == 0 {
		t.Fatal("no reports")
	}
	return reps[len(reps)-1]
}

// TestImageRollbackAfterPostUpgradeHook: the post_upgrade hook fails on
// the new image; the agent sets the image it recorded before the install
// as the default, reboots into it, rolls the config back to the
// checkpoint it took, and reports the rollback step succeeded.
func TestImageRollbackAfterPostUpgradeHook(t *testing.T) {
	r := newSonicRig(t)
	r.imageUpgrade("op-1", "echo BGP sessions down after the upgrade; exit 3")
	r.once(0)
	r.boot()
	r.once(0)
	requireEqual(t, "reports before the rollback's reboot", states(r.ztpd.got()), []string{"install running", "install succeeded",
		"reboot running", "reboot succeeded", "post_upgrade running", "post_upgrade failed", "rollback running"})
	if r.read("next") != oldImage {
		t.Fatalf("next boot's image %q, want the previous %s", r.read("next"), oldImage)
	}
	r.once(0) // the same boot: waits
	r.boot()
	r.once(0)
	requireEqual(t, "commands", r.recorded(), []string{
		"sonic-installer list", "config checkpoint ztpd-op-1", "sonic-installer install -y " + r.ztpd.srv.URL + "/files/sonic.bin",
		"reboot ", "hook post_upgrade",
		"sonic-installer list", "sonic-installer set-default " + oldImage, "reboot ",
		"sonic-installer list", "config rollback ztpd-op-1"})
	rep := lastReport(t, r.ztpd.got())
	if rep.String() != "rollback succeeded" || rep.BootID != "boot-3" {
		t.Fatalf("last report %+v", rep)
	}
	for _, want := range []string{"rolling back: step post_upgrade failed (exit 3)", "rebooted into " + oldImage, "rolled back to " + oldImage} {
		if !strings.Contains(rep.Output, want) {
			t.Fatalf("rollback output lacks %q:\n%s", want, rep.Output)
		}
	}
	t.Logf("rollback transcript:\n%s", rep.Output)
	if r.read("current") != oldImage {
		t.Fatalf("running %s after the rollback", r.read("current"))
	}
	// Done: later polls do nothing.
	n := len(r.recorded())
	r.once(0)
	if len(r.recorded()) != n {
		t.Fatalf("acted after the rollback: %v", r.recorded()[n:])
	}
}

// TestImageRollbackRestoresConfigCopy: an image without `config
// checkpoint` gets its config_db.json back from the copy taken before the
// install, and reloaded.
func TestImageRollbackRestoresConfigCopy(t *testing.T) {
	r := newSonicRig(t)
	os.WriteFile(filepath.Join(r.sw, "checkpoint.exit"), []byte("2"), 0o644)
	r.write("/etc/sonic/config_db.json", `{"DEVICE_METADATA": {"localhost": {"hostname": "leaf1"}}}`, 0o644)
	r.imageUpgrade("op-1", "exit 4")
	r.once(0)
	// The new image migrated (changed) the config.
	r.write("/etc/sonic/config_db.json", `{"DEVICE_METADATA": {"localhost": {"hostname": "migrated"}}}`, 0o644)
	r.boot()
	r.once(0)
	r.boot()
	r.once(0)
	got := r.recorded()
	if got[len(got)-1] != "config reload -y" {
		t.Fatalf("commands %v", got)
	}
	b, _ := os.ReadFile(r.root + "/etc/sonic/config_db.json")
	if !strings.Contains(string(b), "leaf1") {
		t.Fatalf("config_db.json after the rollback: %s", b)
	}
	if rep := lastReport(t, r.ztpd.got()); rep.String() != "rollback succeeded" || !strings.Contains(rep.Output, "restored /etc/sonic/config_db.json") {
		t.Fatalf("last report %+v", rep)
	}
}

// TestImageRollbackPreviousImageGone: the previous image was removed
// (cleaned up) meanwhile: the rollback fails saying so and the switch is
// never rebooted into nothing.
func TestImageRollbackPreviousImageGone(t *testing.T) {
	r := newSonicRig(t)
	r.imageUpgrade("op-1", "exit 3")
	r.once(0)
	r.boot()
	r.setImages(newImage, newImage, newImage) // sonic-installer cleanup
	r.once(0)
	reps := r.ztpd.got()
	rep := lastReport(t, reps)
	if rep.String() != "rollback failed" || !strings.Contains(rep.Output, "previous image "+oldImage+" is gone (installed: "+newImage+"); not rebooting into nothing") {
		t.Fatalf("last report %+v", rep)
	}
	got := r.recorded()
	requireEqual(t, "commands after the hook", got[len(got)-2:], []string{"hook post_upgrade", "sonic-installer list"})
	if _, err := os.Stat(filepath.Join(r.sw, "reboot-pending")); err == nil || r.read("next") != newImage {
		t.Fatalf("rebooted or changed the next image: next %s", r.read("next"))
	}
	if st := r.state(); st.Running != nil {
		t.Fatalf("state %+v", st)
	}
	r.once(0)
	if len(r.recorded()) != len(got) {
		t.Fatalf("a failed rollback was retried: %v", r.recorded())
	}
}

// TestImageRollbackSurvivesKills: the agent is killed (SIGKILL) inside each
// step and each rollback phase in turn; the next run resumes from its
// state file, and every time the switch ends on its previous image with
// its config rolled back, the rollback reported once.
func TestImageRollbackSurvivesKills(t *testing.T) {
	for _, kill := range []struct {
		at   string
		skip int
	}{
		{"sonic-installer list", 0},        // recording the rollback point
		{"config checkpoint", 0},           // taking the checkpoint
		{"sonic-installer install", 0},     // installing
		{"reboot", 0},                      // the upgrade's reboot
		{"hook", 0},                        // the failing hook
		{"sonic-installer list", 1},        // the rollback's first look
		{"sonic-installer set-default", 0}, // the rollback's set-default
		{"reboot", 1},                      // the rollback's reboot
		{"sonic-installer list", 2},        // checking the image after it
		{"config rollback", 0},             // restoring the checkpoint
	} {
		at := kill.at
		t.Run(fmt.Sprintf("%s#%d", at, kill.skip+1), func(t *testing.T) {
			r := newSonicRig(t)
			r.imageUpgrade("op-1", "exit 3")
			if at == "hook" {
				// The hook kills the agent the first time.
				url, sum := r.hook("post", "if [ ! -e "+r.sw+"/hook-ran ]; then touch "+r.sw+"/hook-ran; kill -9 $PPID; fi\n"+r.recordLine("hook $ZTPD_STEP")+"\nexit 3")
				r.offer("op-1", "upgrade-image",
					step("install", "sonic-install", map[string]string{"url": r.ztpd.srv.URL + "/files/sonic.bin"}),
					step("reboot", "reboot", nil),
					step("post_upgrade", "hook", map[string]string{"url": url, "sha256": sum}),
					step("rollback", "rollback", nil))
			} else {
				r.killOn(at, kill.skip)
			}
			for i := 0; i < 12 && !r.rollbackReported(); i++ {
				r.agent("once") // killed runs exit non-zero
				if _, err := os.Stat(filepath.Join(r.sw, "reboot-pending")); err == nil {
					r.boot()
				}
			}
			if !r.rollbackReported() {
				t.Fatalf("no rollback reported: %v\n%v", states(r.ztpd.got()), r.recorded())
			}
			if r.read("current") != oldImage || r.read("next") != oldImage {
				t.Fatalf("ended on %s (next %s)", r.read("current"), r.read("next"))
			}
			got := r.recorded()
			if got[len(got)-1] != "config rollback ztpd-op-1" {
				t.Fatalf("commands %v", got)
			}
			if at != "hook" && !strings.Contains(strings.Join(got, "\n"), "killed the agent in: "+at) {
				t.Fatalf("never killed at %s: %v", at, got)
			}
			n := 0
			for _, rep := range r.ztpd.got() {
				if rep.Step == "rollback" && rep.State == "succeeded" {
					n++
				}
			}
			if n != 1 {
				t.Fatalf("rollback reported succeeded %d times: %v", n, states(r.ztpd.got()))
			}
			t.Logf("killed in %q: %v", at, got)
		})
	}
}

func (r *sonicRig) rollbackReported() bool {
	for _, rep := range r.ztpd.got() {
		if rep.Step == "rollback" && (rep.State == "succeeded" || rep.State == "failed") {
			return true
		}
	}
	return false
}

// TestRollbackOperation: a rollback handed as an operation of its own
// (ztpd's node timeout, `ztpd rollout rollback`) after an upgrade that
// succeeded goes back to the point that upgrade recorded; without one it
// fails saying so.
func TestRollbackOperation(t *testing.T) {
	r := newSonicRig(t)
	r.imageUpgrade("op-1", "exit 0")
	r.once(0)
	r.boot()
	r.once(0)
	if st := r.state(); !st.Complete || r.read("current") != newImage {
		t.Fatalf("upgrade: %+v on %s", st, r.read("current"))
	}
	r.offer("op-2", "rollback", step("rollback", "rollback", nil))
	r.once(0)
	r.boot()
	r.once(0)
	if rep := lastReport(t, r.ztpd.got()); rep.Operation != "op-2" || rep.String() != "rollback succeeded" || r.read("current") != oldImage {
		t.Fatalf("last report %+v, running %s", rep, r.read("current"))
	}
	if st := r.state(); !st.Complete {
		t.Fatalf("state %+v", st)
	}

	fresh := newSonicRig(t)
	fresh.offer("op-1", "rollback", step("rollback", "rollback", nil))
	fresh.once(0)
	if rep := lastReport(t, fresh.ztpd.got()); rep.String() != "rollback failed" || !strings.Contains(rep.Output, "no rollback point") {
		t.Fatalf("rollback without a point: %+v", rep)
	}
}

// TestWorkerRollbackAfterKubeletRestartFails: the kubelet restart after
// `kubeadm upgrade node` fails; the agent puts back the kubeadm, kubelet
// and kubelet config it kept before the step and restarts the kubelet.
func TestWorkerRollbackAfterKubeletRestartFails(t *testing.T) {
	r := newRig(t)
	oldKubelet, oldConfig := "#!/bin/sh\necho v1.36.3\n", "apiVersion: kubelet.config.k8s.io/v1beta1\n# v1.36.3\n"
	r.write("/usr/local/bin/kubelet", oldKubelet, 0o755)
	r.write("/usr/local/bin/kubeadm", "#!/bin/sh\n# kubeadm v1.36.3\n", 0o755)
	r.write("/var/lib/kubelet/config.yaml", oldConfig, 0o644)
	newKubelet, newKubeadm := []byte("#!/bin/sh\necho v1.37.2\n"), []byte("#!/bin/sh\n# kubeadm v1.37.2\n")
	r.ztpd.set(func(f *fakeZTPD) { f.files["kubelet"], f.files["kubeadm"] = newKubelet, newKubeadm })
	// kubeadm upgrade node rewrites the kubelet config; the first kubelet
	// restart fails (the new kubelet does not come up), the second works.
	os.WriteFile(filepath.Join(r.bin, "kubeadm"), []byte("#!/bin/sh\necho \"kubeadm $*\" >> "+r.calls+"\necho '# v1.37.2' > "+r.root+"/var/lib/kubelet/config.yaml\n"), 0o755)
	counter := filepath.Join(r.bin, "restarts")
	os.WriteFile(filepath.Join(r.bin, "systemctl"), []byte("#!/bin/sh\necho \"systemctl $*\" >> "+r.calls+"\necho x >> "+counter+
		"\n[ $(wc -l < "+counter+") -gt 1 ] || { echo 'Job for kubelet.service failed' >&2; exit 1; }\n"), 0o755)
	r.offer("op-1", "upgrade-kubernetes",
		step("upgrade", "kubeadm-upgrade", map[string]string{"version": "v1.37.2", "phase": "node", "binaries_url": r.ztpd.srv.URL + "/files"}),
		step("rollback", "rollback", nil))
	r.once(0)
	requireEqual(t, "commands", r.recorded(), []string{"kubeadm upgrade node", "systemctl restart kubelet", "systemctl restart kubelet"})
	requireEqual(t, "reports", states(r.ztpd.got()), []string{"upgrade running", "upgrade failed", "rollback running", "rollback succeeded"})
	for path, want := range map[string]string{"/usr/local/bin/kubelet": oldKubelet, "/var/lib/kubelet/config.yaml": oldConfig} {
		b, _ := os.ReadFile(r.root + path)
		if string(b) != want {
			t.Fatalf("%s after the rollback: %q", path, b)
		}
	}
	if fi, _ := os.Stat(r.root + "/usr/local/bin/kubelet"); fi.Mode().Perm() != 0o755 {
		t.Fatalf("kubelet mode %v", fi.Mode())
	}
	t.Logf("rollback transcript:\n%s", lastReport(t, r.ztpd.got()).Output)
}

// TestControlPlaneUpgradeFailureNamesKubeadmBackups: a failed `kubeadm
// upgrade apply` is left to kubeadm's own rollback; the step's output
// names the backups it kept.
func TestControlPlaneUpgradeFailureNamesKubeadmBackups(t *testing.T) {
	r := newRig(t)
	os.WriteFile(filepath.Join(r.bin, "kubeadm.exit"), []byte("1"), 0o644)
	os.MkdirAll(r.root+"/etc/kubernetes/tmp/kubeadm-backup-etcd-2026-12-05-11-00-00", 0o700)
	os.MkdirAll(r.root+"/etc/kubernetes/tmp/kubeadm-backup-manifests-2026-12-05-11-00-00", 0o700)
	r.offer("op-1", "upgrade-kubernetes", step("upgrade", "kubeadm-upgrade", map[string]string{"version": "v1.37.2", "phase": "apply"}))
	r.once(0)
	rep := lastReport(t, r.ztpd.got())
	if rep.String() != "upgrade failed" || !strings.Contains(rep.Output, "kubeadm's backups: /etc/kubernetes/tmp/kubeadm-backup-etcd-2026-12-05-11-00-00, /etc/kubernetes/tmp/kubeadm-backup-manifests-2026-12-05-11-00-00") {
		t.Fatalf("report %+v", rep)
	}
}

// TestImageInstallWithoutCurrentImage: `sonic-installer list` names no
// current image (an older image, a simulated switch). With an automatic
// rollback step the agent refuses to install (it could not go back);
// without one the install goes on with no rollback point.
func TestImageInstallWithoutCurrentImage(t *testing.T) {
	r := newSonicRig(t)
	r.setImages("", "", oldImage)
	r.imageUpgrade("op-1", "exit 0")
	r.once(0)
	refused := false
	for _, rep := range r.ztpd.got() {
		refused = refused || rep.String() == "install failed" && strings.Contains(rep.Output, "no current image: no rollback point, not installing")
	}
	if !refused {
		t.Fatalf("with rollback auto: no refused install among %v", r.ztpd.got())
	}
	for _, c := range r.recorded() {
		if strings.HasPrefix(c, "sonic-installer install") {
			t.Fatalf("installed without a rollback point: %v", r.recorded())
		}
	}

	m := newSonicRig(t)
	m.setImages("", "", oldImage)
	m.ztpd.set(func(f *fakeZTPD) { f.files["sonic.bin"] = []byte("sonic image bytes") })
	m.offer("op-2", "upgrade-image", step("install", "sonic-install", map[string]string{"url": m.ztpd.srv.URL + "/files/sonic.bin"}))
	m.once(0)
	if rep := lastReport(t, m.ztpd.got()); rep.String() != "install succeeded" {
		t.Fatalf("with rollback manual: last report %+v", rep)
	}
	if st := m.state(); st.RollbackPoint != nil {
		t.Fatalf("a rollback point without a current image: %+v", st.RollbackPoint)
	}
}
