package lab

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// A SONiC switch's image and reboot tools, simulated for its agent's day-2
// operations (image upgrades and their rollback): sonic-installer keeps
// the installed images, the current and the next boot's under
// $ZTPD_ROOT/host/lab-images; reboot boots the next image (current :=
// next) with a new boot id at $ZTPD_ROOT/proc/sys/kernel/random/boot_id,
// the file the agent reads; config answers checkpoint, rollback, reload
// and kube server disable. Every call is recorded in
// $ZTPD_ROOT/lab-calls.log. The switch's kubelet follows as ctrmgrd
// would: stopped when Kubernetes is reset on it (kubeadm reset, or the
// KUBERNETES_MASTER server disabled), started again with the certificate
// of each join the agent's join plugin makes (watchSwitchKubelet).

// LabSonicImage is the image a lab switch runs before any upgrade.
const LabSonicImage = "SONiC-OS-lab.202405"

func writeSonicTools(bin, root string) error {
	images := filepath.Join(root, "host/lab-images")
	if err := os.MkdirAll(images, 0o755); err != nil {
		return err
	}
	for name, v := range map[string]string{"current": LabSonicImage, "next": LabSonicImage, "available": LabSonicImage} {
		p := filepath.Join(images, name)
		if _, err := os.Stat(p); err == nil {
			continue
		}
		if err := os.WriteFile(p, []byte(v+"\n"), 0o644); err != nil {
			return err
		}
	}
	if err := writeBootID(root); err != nil {
		return err
	}
	scripts := map[string]string{
		"sonic-installer": `#!/bin/sh
# ztpd-lab: a switch's sonic-installer (simulated).
echo "sonic-installer $*" >> "$ZTPD_ROOT/lab-calls.log"
d="$ZTPD_ROOT/host/lab-images"
case "$1" in
list)
	echo "Current: $(cat "$d/current")"
	echo "Next: $(cat "$d/next")"
	echo "Available:"
	cat "$d/available" ;;
install)
	f=""
	for a in "$@"; do f="$a"; done
	[ -f "$f" ] || { echo "image $f not found" >&2; exit 1; }
	# The image names itself in its first line ("# SONiC-OS-..."), else by its digest.
	name=$(sed -n '1s/^# *\(SONiC-OS-[A-Za-z0-9._-]*\).*/\1/p' "$f")
	[ -n "$name" ] || name="SONiC-OS-$(sha256sum "$f" | cut -c1-12)"
	grep -qx "$name" "$d/available" || echo "$name" >> "$d/available"
	echo "$name" > "$d/next"
	echo "Installed $name; it boots next" ;;
set-default)
	grep -qx "$2" "$d/available" || { echo "Image $2 is not installed" >&2; exit 1; }
	echo "$2" > "$d/next" ;;
*) echo "sonic-installer $1: not simulated" >&2; exit 1 ;;
esac
`,
		"reboot": `#!/bin/sh
# ztpd-lab: a switch's reboot (simulated): the next image boots, with a new boot id.
echo "reboot $*" >> "$ZTPD_ROOT/lab-calls.log"
d="$ZTPD_ROOT/host/lab-images"
cp "$d/next" "$d/current"
cat /proc/sys/kernel/random/uuid > "$ZTPD_ROOT/proc/sys/kernel/random/boot_id"
exit 0
`,
		"config": `#!/bin/sh
# ztpd-lab: a switch's config command (simulated).
echo "config $*" >> "$ZTPD_ROOT/lab-calls.log"
case "$1 $2 $3 $4" in
"kube server disable on") touch "$ZTPD_ROOT/lab-kubelet-stop" ;;
esac
exit 0
`,
	}
	for name, body := range scripts {
		if err := os.WriteFile(filepath.Join(bin, name), []byte(body), 0o755); err != nil {
			return err
		}
	}
	return nil
}

func writeBootID(root string) error {
	p := filepath.Join(root, "proc/sys/kernel/random/boot_id")
	if _, err := os.Stat(p); err == nil {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(rand.Text()+"\n"), 0o644)
}

// installJoinPlugin puts the join plugin the switch downloaded at ZTP where
// its agent runs it for a rejoin ($ZTPD_ROOT/usr/local/bin/ztpd-join-plugin),
// wrapped as at ZTP so the delivery is kept for the simulated kubelet. A
// join's bundle installs the plain plugin there, so the wrapper puts
// itself back after each join.
func installJoinPlugin(dir, root string) error {
	p := filepath.Join(root, "usr/local/bin/ztpd-join-plugin")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return err
	}
	keep := filepath.Join(dir, "lab-join-plugin")
	// lab-joined tells watchSwitchKubelet the join is complete (certificate
	// and key installed), not just its delivery received.
	body := fmt.Sprintf("#!/bin/sh\n# ztpd-lab: the switch's join plugin, its delivery kept for the simulated kubelet.\n"+
		"python3 %q %q \"$@\" || exit $?\ncp %q \"$ZTPD_ROOT/usr/local/bin/ztpd-join-plugin\"\ntouch \"$ZTPD_ROOT/lab-joined\"\n",
		filepath.Join(dir, "run-join-plugin.py"), filepath.Join(dir, "ztpd-join-plugin"), keep)
	if err := os.WriteFile(keep, []byte(body), 0o755); err != nil {
		return err
	}
	return os.WriteFile(p, []byte(body), 0o755)
}

// watchSwitchKubelet runs the switch's kubelet as its agent's operations
// leave it, until the lab closes: stopped when Kubernetes is reset on it,
// started again (TLS bootstrap with the new certificate) after each join.
func (l *Lab) watchSwitchKubelet(d Device, root string) {
	joined := filepath.Join(root, "lab-joined")
	stop := filepath.Join(root, "lab-kubelet-stop")
	logf := func(format string, args ...any) {
		msg := fmt.Sprintf(format, args...)
		l.steps.set(d.Name, msg)
		if f, err := os.OpenFile(filepath.Join(l.Topo.WorkDir, "lab-switch-"+d.Name+".log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
			fmt.Fprintf(f, "%s %s\n", time.Now().UTC().Format(time.TimeOnly), msg)
			f.Close()
		}
	}
	for {
		select {
		case <-l.Kube.closed:
			return
		case <-time.After(300 * time.Millisecond):
		}
		kl := l.Kube.Kubelet(d.Name)
		if kl == nil {
			continue
		}
		if _, err := os.Stat(stop); err == nil {
			os.Remove(stop)
			kl.Proc.Stop(5 * time.Second)
			logf("kubelet stopped (Kubernetes reset on the switch)")
		}
		if _, err := os.Stat(joined); err == nil {
			os.Remove(joined)
			kl.Proc.Stop(5 * time.Second)
			logf("joined again: kubelet (simulated) TLS bootstrap with the new certificate")
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			err := l.Kube.joinSwitch(ctx, kl.NS, root, d, argAfter(kl.args, "--node-ip"), func(dev, step string) { logf("%s", step) })
			cancel()
			if err != nil {
				logf("kubelet after the rejoin: %v", err)
			} else {
				logf("kubelet registered after the rejoin")
			}
		}
	}
}

func argAfter(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}
