package bundle

import (
	"bytes"
	"crypto"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	yaml3 "go.yaml.in/yaml/v3"
	"sigs.k8s.io/yaml"

	"github.com/ztpd/ztpd/joiner/pki"
	"github.com/ztpd/ztpd/joiner/tokens"
	"github.com/ztpd/ztpd/testenv/testpki"
)

var update = flag.Bool("update", false, "rewrite golden files")

func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create)", err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s differs from golden file:\n--- got ---\n%s\n--- want ---\n%s", name, got, want)
	}
}

func mustToken(s string) tokens.BootstrapToken {
	t, err := tokens.ParseBootstrapToken(s)
	if err != nil {
		panic(err)
	}
	return t
}

var (
	tokA    = mustToken("abcdef.0123456789abcdef")
	tokB    = mustToken("ghijkl.0123456789ghijkl")
	certKey = func() tokens.CertificateKey {
		k, _ := tokens.ParseCertificateKey(strings.Repeat("0a1b", 16))
		return k
	}()
	caHash = "sha256:" + strings.Repeat("5e", 32)
)

func initParams(v string, alg pki.Algorithm) InitParams {
	return InitParams{
		Version:              MustVersion(v),
		ControlPlaneEndpoint: "10.99.1.10:6443",
		AdvertiseAddress:     "10.99.1.11",
		NodeName:             "prod-a-control-1",
		CertSANs:             []string{"api.prod-a.example", "10.99.1.10"},
		Tokens: []Token{
			{Token: tokA, TTL: 24 * time.Hour, Description: "ztpd: worker prod-a-node-1"},
			{Token: tokB, TTL: 0, Description: "ztpd: control plane prod-a-control-2"},
		},
		CertificateKey:      certKey,
		EncryptionAlgorithm: alg,
		PodSubnet:           "10.244.0.0/16",
	}
}

func TestVersionsAndKubeadmAPI(t *testing.T) {
	cases := map[string]KubeadmAPI{
		"1.11.0": KubeadmFlags, "v1.14.10": KubeadmFlags, "1.15.0": KubeadmV1Beta2, "1.21.14": KubeadmV1Beta2,
		"1.22.0": KubeadmV1Beta3, "1.30.9": KubeadmV1Beta3, "1.31.0": KubeadmV1Beta4, "1.35.1": KubeadmV1Beta4,
	}
	for v, want := range cases {
		got, err := KubeadmAPIFor(MustVersion(v))
		if err != nil || got != want {
			t.Errorf("%s: %v %v, want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"1.10.13", "2.0.0", "0.9.0"} {
		if _, err := KubeadmAPIFor(MustVersion(v)); err == nil {
			t.Errorf("%s accepted", v)
		}
	}
	for _, s := range []string{"", "1.2", "1.2.3.4", "1.x.3", "v1.02.3", "1.2.-3", "1..3", " 1.2.3"} {
		if _, err := ParseVersion(s); err == nil {
			t.Errorf("ParseVersion(%q) accepted", s)
		}
	}
	if MustVersion("v1.28.4").Tag() != "v1.28.4" || MustVersion("1.28.4") != (Version{Major: 1, Minor: 28, Patch: 4}) {
		t.Fatal("version round trip")
	}
}

func TestPlanInitGolden(t *testing.T) {
	for _, c := range []struct {
		name, version string
		alg           pki.Algorithm
	}{
		{"init-v1beta2", "1.20.15", pki.RSA2048},
		{"init-v1beta3", "1.28.4", pki.RSA2048},
		{"init-v1beta4", "1.31.2", pki.ECDSAP256},
	} {
		t.Run(c.name, func(t *testing.T) {
			plan, err := PlanInit(initParams(c.version, c.alg))
			if err != nil {
				t.Fatal(err)
			}
			golden(t, c.name, plan.Config)
			want := []string{"kubeadm", "init", "--config", KubeadmConfigPath, "--upload-certs"}
			if len(plan.Commands) != 1 || strings.Join(plan.Commands[0], " ") != strings.Join(want, " ") {
				t.Fatalf("commands %q", plan.Commands)
			}
			checkInitStrict(t, plan, c.version)
		})
	}
}

// checkInitStrict decodes the rendered documents into mirrors of kubeadm's
// own types with unknown fields refused, then checks the values.
func checkInitStrict(t *testing.T, plan KubeadmPlan, version string) {
	t.Helper()
	docs := strings.Split(string(plan.Config), "\n---\n")
	if len(docs) != 2 {
		t.Fatalf("want 2 YAML documents, got %d", len(docs))
	}
	var tokensGot []kBootstrapToken
	var certKeyGot, endpoint, kv, enc string
	var sans []string
	switch plan.API {
	case KubeadmV1Beta2, KubeadmV1Beta3:
		var ic kInitConfigurationV1B3
		var cc kClusterConfigurationV1B3
		if err := yaml.UnmarshalStrict([]byte(docs[0]), &ic); err != nil {
			t.Fatalf("InitConfiguration: %v", err)
		}
		if err := yaml.UnmarshalStrict([]byte(docs[1]), &cc); err != nil {
			t.Fatalf("ClusterConfiguration: %v", err)
		}
		if ic.Kind != "InitConfiguration" || cc.Kind != "ClusterConfiguration" || ic.APIVersion != string(plan.API) || cc.APIVersion != string(plan.API) {
			t.Fatalf("type meta %+v %+v", ic.kTypeMeta, cc.kTypeMeta)
		}
		tokensGot, certKeyGot, endpoint, kv, sans = ic.BootstrapTokens, ic.CertificateKey, cc.ControlPlaneEndpoint, cc.KubernetesVersion, cc.APIServer.CertSANs
		if ic.LocalAPIEndpoint.AdvertiseAddress != "10.99.1.11" || ic.NodeRegistration.Name != "prod-a-control-1" {
			t.Fatalf("node registration %+v %+v", ic.NodeRegistration, ic.LocalAPIEndpoint)
		}
	case KubeadmV1Beta4:
		var ic kInitConfigurationV1B4
		var cc kClusterConfigurationV1B4
		if err := yaml.UnmarshalStrict([]byte(docs[0]), &ic); err != nil {
			t.Fatalf("InitConfiguration: %v", err)
		}
		if err := yaml.UnmarshalStrict([]byte(docs[1]), &cc); err != nil {
			t.Fatalf("ClusterConfiguration: %v", err)
		}
		if ic.APIVersion != string(plan.API) || cc.APIVersion != string(plan.API) {
			t.Fatal("api version")
		}
		tokensGot, certKeyGot, endpoint, kv, sans, enc = ic.BootstrapTokens, ic.CertificateKey, cc.ControlPlaneEndpoint, cc.KubernetesVersion, cc.APIServer.CertSANs, cc.EncryptionAlgorithm
		if enc != "ECDSA-P256" {
			t.Fatalf("encryptionAlgorithm %q", enc)
		}
	default:
		t.Fatalf("api %s", plan.API)
	}
	if len(tokensGot) != 2 || tokensGot[0].Token != tokA.Reveal() || tokensGot[0].TTL != "24h0m0s" || tokensGot[1].TTL != "0s" {
		t.Fatalf("bootstrap tokens %+v", tokensGot)
	}
	if strings.Join(tokensGot[0].Usages, ",") != "signing,authentication" || strings.Join(tokensGot[0].Groups, ",") != tokens.DefaultNodeGroup {
		t.Fatalf("token usages/groups %+v", tokensGot[0])
	}
	if certKeyGot != certKey.Reveal() || endpoint != "10.99.1.10:6443" || kv != "v"+strings.TrimPrefix(version, "v") {
		t.Fatalf("certificateKey %q endpoint %q version %q", certKeyGot, endpoint, kv)
	}
	if strings.Join(sans, ",") != "10.99.1.10,10.99.1.11,api.prod-a.example" {
		t.Fatalf("certSANs %v", sans)
	}
}

// TestStrictDecodeCatchesWrongFields proves the mirrors are strict: a
// v1beta4-only field in a v1beta3 document, or a typo, is refused.
func TestStrictDecodeCatchesWrongFields(t *testing.T) {
	var cc kClusterConfigurationV1B3
	if err := yaml.UnmarshalStrict([]byte("apiVersion: kubeadm.k8s.io/v1beta3\nkind: ClusterConfiguration\nencryptionAlgorithm: ECDSA-P256\n"), &cc); err == nil {
		t.Fatal("encryptionAlgorithm accepted in v1beta3")
	}
	var jc kJoinConfigurationV1B4
	if err := yaml.UnmarshalStrict([]byte("apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  bootstrapToken:\n    tokn: x\n"), &jc); err == nil {
		t.Fatal("typo accepted")
	}
	if err := yaml.UnmarshalStrict([]byte("apiVersion: kubeadm.k8s.io/v1beta4\nkind: JoinConfiguration\ndiscovery:\n  timeout: 5m\n"), &jc); err == nil {
		t.Fatal("v1beta3 discovery.timeout accepted in v1beta4")
	}
}

func TestPlanInitFlagsForOldReleases(t *testing.T) {
	p := initParams("1.14.10", pki.RSA2048)
	plan, err := PlanInit(p)
	if err != nil {
		t.Fatal(err)
	}
	if plan.Config != nil || plan.API != KubeadmFlags {
		t.Fatal("flags mode renders a config file")
	}
	var lines []string
	for _, c := range plan.Commands {
		lines = append(lines, shellJoin(c))
	}
	golden(t, "init-flags", []byte(strings.Join(lines, "\n")+"\n"))
	if !strings.Contains(lines[0], "'--token' 'abcdef.0123456789abcdef'") || !strings.Contains(lines[1], "'token' 'create' 'ghijkl.0123456789ghijkl'") {
		t.Fatalf("commands %v", lines)
	}
}

func TestPlanJoinGolden(t *testing.T) {
	worker := JoinParams{
		Version:           MustVersion("1.28.4"),
		APIServerEndpoint: "10.99.1.10:6443",
		Token:             tokA,
		CACertHashes:      []string{caHash},
		NodeName:          "prod-a-node-1",
	}
	plan, err := PlanJoin(worker)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "join-worker-v1beta3", plan.Config)
	var jc kJoinConfigurationV1B3
	if err := yaml.UnmarshalStrict(plan.Config, &jc); err != nil {
		t.Fatal(err)
	}
	bt := jc.Discovery.BootstrapToken
	if jc.Kind != "JoinConfiguration" || bt == nil || bt.Token != tokA.Reveal() || bt.APIServerEndpoint != "10.99.1.10:6443" ||
		len(bt.CACertHashes) != 1 || bt.CACertHashes[0] != caHash || bt.UnsafeSkipCAVerification || jc.ControlPlane != nil {
		t.Fatalf("join configuration %+v %+v", jc, bt)
	}
	if bytes.Contains(plan.Config, []byte("unsafeSkipCAVerification")) {
		t.Fatal("unsafeSkipCAVerification rendered")
	}

	cp := worker
	cp.Version = MustVersion("1.31.2")
	cp.ControlPlane, cp.CertificateKey, cp.AdvertiseAddress, cp.NodeName = true, certKey, "10.99.1.12", "prod-a-control-2"
	plan, err = PlanJoin(cp)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "join-control-plane-v1beta4", plan.Config)
	var jc4 kJoinConfigurationV1B4
	if err := yaml.UnmarshalStrict(plan.Config, &jc4); err != nil {
		t.Fatal(err)
	}
	if jc4.ControlPlane == nil || jc4.ControlPlane.CertificateKey != certKey.Reveal() || jc4.ControlPlane.LocalAPIEndpoint.AdvertiseAddress != "10.99.1.12" {
		t.Fatalf("control plane %+v", jc4.ControlPlane)
	}

	old := worker
	old.Version = MustVersion("1.12.3")
	plan, err = PlanJoin(old)
	if err != nil {
		t.Fatal(err)
	}
	got := shellJoin(plan.Commands[0])
	if !strings.Contains(got, "'--discovery-token-ca-cert-hash' '"+caHash+"'") || strings.Contains(got, "unsafe") {
		t.Fatalf("flags join %s", got)
	}
}

func TestPlanRefusesUnsafeOrBrokenInput(t *testing.T) {
	base := JoinParams{Version: MustVersion("1.28.4"), APIServerEndpoint: "10.99.1.10:6443", Token: tokA, CACertHashes: []string{caHash}}
	for name, mutate := range map[string]func(*JoinParams){
		"no CA hash":         func(p *JoinParams) { p.CACertHashes = nil },
		"bad CA hash":        func(p *JoinParams) { p.CACertHashes = []string{"sha256:XYZ"} },
		"upper-case CA hash": func(p *JoinParams) { p.CACertHashes = []string{"sha256:" + strings.Repeat("AB", 32)} },
		"no token":           func(p *JoinParams) { p.Token = tokens.BootstrapToken{} },
		"no port":            func(p *JoinParams) { p.APIServerEndpoint = "10.99.1.10" },
		"shell in host":      func(p *JoinParams) { p.APIServerEndpoint = "$(reboot):6443" },
		"cp without key":     func(p *JoinParams) { p.ControlPlane = true },
		"cp before 1.16": func(p *JoinParams) {
			p.ControlPlane, p.CertificateKey, p.Version = true, certKey, MustVersion("1.15.3")
		},
		"unsupported version": func(p *JoinParams) { p.Version = MustVersion("1.10.0") },
	} {
		p := base
		mutate(&p)
		if _, err := PlanJoin(p); err == nil {
			t.Errorf("join %s: accepted", name)
		}
	}
	ib := initParams("1.28.4", pki.RSA2048)
	for name, mutate := range map[string]func(*InitParams){
		"no tokens":         func(p *InitParams) { p.Tokens = nil },
		"ECDSA before 1.31": func(p *InitParams) { p.EncryptionAlgorithm = pki.ECDSAP256 },
		"bad usage":         func(p *InitParams) { p.Tokens = []Token{{Token: tokA, Usages: []string{"root"}}} },
		"bad group":         func(p *InitParams) { p.Tokens = []Token{{Token: tokA, Groups: []string{"system:masters"}}} },
		"fractional TTL":    func(p *InitParams) { p.Tokens = []Token{{Token: tokA, TTL: 1500 * time.Millisecond}} },
		"bad endpoint":      func(p *InitParams) { p.ControlPlaneEndpoint = "10.0.0.1:0" },
	} {
		p := ib
		mutate(&p)
		if _, err := PlanInit(p); err == nil {
			t.Errorf("init %s: accepted", name)
		}
	}
}

const (
	fakeCACert = "-----BEGIN CERTIFICATE-----\nMIIBfakecertificate\n-----END CERTIFICATE-----\n"
	fakeCAKey  = "-----BEGIN RSA PRIVATE KEY-----\nMIIBfakekey\n-----END RSA PRIVATE KEY-----\n"
)

func TestCloudConfigGolden(t *testing.T) {
	initPlan, err := PlanInit(initParams("1.28.4", pki.RSA2048))
	if err != nil {
		t.Fatal(err)
	}
	joinPlan, err := PlanJoin(JoinParams{Version: MustVersion("1.28.4"), APIServerEndpoint: "10.99.1.10:6443",
		Token: tokA, CACertHashes: []string{caHash}, NodeName: "prod-a-node-1"})
	if err != nil {
		t.Fatal(err)
	}
	report := &Report{URL: "http://10.99.0.1:8080/join/report", Token: "r3port.t0ken"}
	first, err := RenderCloudConfig(CloudConfigParams{
		Role: RoleFirstControlPlane, Plan: initPlan, CACertPEM: []byte(fakeCACert), CAKeyPEM: []byte(fakeCAKey),
		SSHAuthorizedKeys: []string{"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFake admin@example"},
		ExtraManifests:    map[string][]byte{"sonic-rbac.yaml": []byte(SonicRBAC)},
		Report:            report,
	})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "cloud-config-first-control-plane", first)
	worker, err := RenderCloudConfig(CloudConfigParams{Role: RoleWorker, Plan: joinPlan, Report: report, EjectISO: true})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "cloud-config-worker", worker)

	for name, doc := range map[string][]byte{"first": first, "worker": worker} {
		if !bytes.HasPrefix(doc, []byte("#cloud-config\n")) {
			t.Fatalf("%s: no #cloud-config header", name)
		}
		var cc cloudConfig
		dec := yaml3.NewDecoder(bytes.NewReader(doc))
		dec.KnownFields(true)
		if err := dec.Decode(&cc); err != nil {
			t.Fatalf("%s: YAML: %v", name, err)
		}
		files := map[string]writeFile{}
		for _, f := range cc.WriteFiles {
			files[f.Path] = f
		}
		cfg, ok := files[KubeadmConfigPath]
		if !ok || cfg.Permissions != "0600" {
			t.Fatalf("%s: kubeadm config file %+v", name, cfg)
		}
		plan := joinPlan
		if name == "first" {
			plan = initPlan
		}
		if cfg.Content != string(plan.Config) {
			t.Fatalf("%s: kubeadm config content changed in YAML round trip", name)
		}
		key, hasKey := files["/etc/kubernetes/pki/ca.key"]
		if name == "first" {
			if !hasKey || key.Permissions != "0600" || key.Content != fakeCAKey || files["/etc/kubernetes/pki/ca.crt"].Content != fakeCACert {
				t.Fatalf("first control plane CA files %+v", key)
			}
		} else if hasKey || files["/etc/kubernetes/pki/ca.crt"].Path != "" {
			t.Fatal("worker user-data carries the CA")
		}
		// The real-tool checks are subtests, so a missing tool skips only
		// them (with the reason) and the checks below still run.
		t.Run(name+"/PyYAML", func(t *testing.T) { pyYAMLAgrees(t, name, doc, cc) })
		for _, f := range cc.WriteFiles {
			if strings.HasPrefix(f.Content, "#!/bin/bash") {
				t.Run(name+"/bash -n "+f.Path, func(t *testing.T) { bashSyntax(t, name+":"+f.Path, f.Content) })
			}
		}
		setup := files[setupScriptPath].Content
		for _, want := range []string{"blkid -o device -t LABEL=CDROM", "/mnt/k8sdisk", "ctr -n k8s.io image import", "/opt/cni/bin", "crictl-linux-", "sed \"s:/usr/bin:/opt/bin:g\""} {
			if !strings.Contains(setup, want) {
				t.Fatalf("%s: setup script lacks %q", name, want)
			}
		}
		deploy := files[deployPath].Content
		if !strings.Contains(deploy, shellJoin(plan.Commands[0])) || strings.Contains(deploy, "unsafe-skip") {
			t.Fatalf("%s: deploy script does not run the plan", name)
		}
		if files[reportEnvPath].Permissions != "0600" || !strings.Contains(files[reportEnvPath].Content, "r3port.t0ken") {
			t.Fatalf("%s: report credentials file %+v", name, files[reportEnvPath])
		}
	}
}

// pyYAMLAgrees loads the user-data with PyYAML's safe_load, the loader
// cloud-init uses, and checks it reads the same files and commands.
func pyYAMLAgrees(t *testing.T, name string, doc []byte, cc cloudConfig) {
	t.Helper()
	py, err := exec.LookPath("python3")
	if err != nil {
		t.Skip("python3 not installed: cannot check the user-data with PyYAML")
	}
	cmd := exec.Command(py, "-c", `import sys, json, yaml
d = yaml.safe_load(sys.stdin)
json.dump({"files": [[f["path"], f["permissions"], f["content"]] for f in d["write_files"]], "runcmd": d["runcmd"]}, sys.stdout)`)
	cmd.Stdin = bytes.NewReader(doc)
	out, err := cmd.Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok && strings.Contains(string(ee.Stderr), "No module named 'yaml'") {
			t.Skip("PyYAML (python3-yaml) not installed: cannot check the user-data with it")
		}
		t.Fatalf("%s: PyYAML: %v", name, err)
	}
	var got struct {
		Files  [][3]string `json:"files"`
		RunCmd []string    `json:"runcmd"`
	}
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Files) != len(cc.WriteFiles) || strings.Join(got.RunCmd, "\n") != strings.Join(cc.RunCmd, "\n") {
		t.Fatalf("%s: PyYAML reads %d files / runcmd %q", name, len(got.Files), got.RunCmd)
	}
	for i, f := range cc.WriteFiles {
		if got.Files[i] != [3]string{f.Path, f.Permissions, f.Content} {
			t.Fatalf("%s: PyYAML reads file %d differently: %q", name, i, got.Files[i][0])
		}
	}
}

func bashSyntax(t *testing.T, name, script string) {
	t.Helper()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("bash not installed: cannot syntax-check the scripts")
	}
	cmd := exec.Command(bash, "-n")
	cmd.Stdin = strings.NewReader(script)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: bash -n: %v\n%s", name, err, out)
	}
}

func TestCloudConfigRefusesMisuse(t *testing.T) {
	joinPlan, _ := PlanJoin(JoinParams{Version: MustVersion("1.28.4"), APIServerEndpoint: "10.99.1.10:6443", Token: tokA, CACertHashes: []string{caHash}})
	initPlan, _ := PlanInit(initParams("1.28.4", pki.RSA2048))
	for name, p := range map[string]CloudConfigParams{
		"worker with CA":      {Role: RoleWorker, Plan: joinPlan, CACertPEM: []byte(fakeCACert), CAKeyPEM: []byte(fakeCAKey)},
		"first without CA":    {Role: RoleFirstControlPlane, Plan: initPlan},
		"unknown role":        {Role: "boss", Plan: joinPlan},
		"empty plan":          {Role: RoleWorker},
		"bad report URL":      {Role: RoleWorker, Plan: joinPlan, Report: &Report{URL: "ftp://x/y", Token: "t"}},
		"report token quotes": {Role: RoleWorker, Plan: joinPlan, Report: &Report{URL: "http://x/y", Token: "a'b"}},
		"manifest traversal": {Role: RoleFirstControlPlane, Plan: initPlan, CACertPEM: []byte(fakeCACert), CAKeyPEM: []byte(fakeCAKey),
			ExtraManifests: map[string][]byte{"../etc/passwd": nil}},
	} {
		if _, err := RenderCloudConfig(p); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSonicJoin(t *testing.T) {
	ca, err := pki.NewCA("kubernetes", pki.RSA2048, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	_, csrPEM, err := testpki.DeviceCSR()
	if err != nil {
		t.Fatal(err)
	}
	csr, err := pki.ParseCSR(csrPEM)
	if err != nil {
		t.Fatal(err)
	}
	j, err := RenderSonic(SonicParams{ClusterID: "4f7c2d1e-0b7a-4a55-9d1e-1c2b3a4d5e6f", ServerHost: "10.99.1.10", SwitchName: "Leaf-01", CSR: csr}, ca, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "sonic-configdb", j.ConfigDB)
	var db map[string]map[string]map[string]any
	if err := json.Unmarshal(j.ConfigDB, &db); err != nil {
		t.Fatal(err)
	}
	for k, v := range db["KUBERNETES_MASTER"]["SERVER"] {
		if _, ok := v.(string); !ok {
			t.Fatalf("config_db value %s is %T, config_db wants strings", k, v)
		}
	}
	if j.UserName != "system:bootstrap:leaf-01" || len(j.Files) != 2 {
		t.Fatalf("sonic join %+v", j)
	}
	cert, err := pki.ParseCertPEM(j.Files[0].Content)
	if err != nil {
		t.Fatal(err)
	}
	orgs := slices.Sorted(slices.Values(cert.Subject.Organization)) // a DER SET: order is not kept
	if cert.Subject.CommonName != j.UserName || strings.Join(orgs, ",") != "system:bootstrappers,"+tokens.DefaultNodeGroup+","+SonicGroup {
		t.Fatalf("switch certificate subject %v", cert.Subject)
	}
	if err := cert.CheckSignatureFrom(ca.Certificate()); err != nil {
		t.Fatal(err)
	}
	// The switch keeps its key: only the certificate for it and the CA go out.
	if j.Files[0].Path != SonicClientCertPath || !strings.HasPrefix(j.Files[1].Path, "/usr/local/share/ca-certificates/") {
		t.Fatalf("files %v", j.Files)
	}
	if !cert.PublicKey.(interface{ Equal(crypto.PublicKey) bool }).Equal(csr.PublicKey()) {
		t.Fatal("switch certificate is not for the request's key")
	}
	out, _ := json.Marshal(j)
	if bytes.Contains(out, []byte("PRIVATE KEY")) || strings.Contains(fmt.Sprintf("%v %+v %#v", j, j, j), "PRIVATE KEY") {
		t.Fatal("switch key printed")
	}
	if _, err := RenderSonic(SonicParams{ClusterID: "c", ServerHost: "10.99.1.10", SwitchName: "bad name", CSR: csr}, ca, time.Now()); err == nil {
		t.Fatal("bad switch name accepted")
	}
	if _, err := RenderSonic(SonicParams{ClusterID: "c", ServerHost: "10.99.1.10", SwitchName: "leaf-01"}, ca, time.Now()); err == nil {
		t.Fatal("a switch without a request got a certificate")
	}
	var rbac []map[string]any
	for _, doc := range strings.Split(SonicRBAC, "\n---\n") {
		var m map[string]any
		if err := yaml.UnmarshalStrict([]byte(doc), &m); err != nil {
			t.Fatal(err)
		}
		rbac = append(rbac, m)
	}
	if len(rbac) != 4 {
		t.Fatalf("RBAC documents %d", len(rbac))
	}
}

// TestClusterAdminsRBAC: the binding applied at init gives the kubeconfig
// group cluster-admin, and nothing else.
func TestClusterAdminsRBAC(t *testing.T) {
	var b struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Metadata   struct {
			Name   string            `json:"name"`
			Labels map[string]string `json:"labels"`
		} `json:"metadata"`
		RoleRef  map[string]string   `json:"roleRef"`
		Subjects []map[string]string `json:"subjects"`
	}
	if err := yaml.UnmarshalStrict([]byte(ClusterAdminsRBAC), &b); err != nil {
		t.Fatal(err)
	}
	if b.APIVersion != "rbac.authorization.k8s.io/v1" || b.Kind != "ClusterRoleBinding" || b.Metadata.Name != "ztpd:cluster-admins" ||
		b.RoleRef["kind"] != "ClusterRole" || b.RoleRef["name"] != "cluster-admin" || len(b.Subjects) != 1 ||
		b.Subjects[0]["kind"] != "Group" || b.Subjects[0]["name"] != ClusterAdminsGroup {
		t.Fatalf("binding %+v", b)
	}
}

func TestK3sAgent(t *testing.T) {
	tok, err := tokens.ParseK3sToken("K10" + strings.Repeat("ab", 32) + "::abcdef.0123456789abcdef")
	if err != nil {
		t.Fatal(err)
	}
	a, err := RenderK3sAgent(K3sAgentParams{ServerURL: "https://10.99.1.10:6443", Token: tok, NodeName: "leaf-01", NodeLabels: []string{"hwsku=Accton-AS7712"}})
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "k3s-agent-config", a.Config.Content)
	var cfg map[string]any
	if err := yaml.UnmarshalStrict(a.Config.Content, &cfg); err != nil {
		t.Fatal(err)
	}
	if cfg["server"] != "https://10.99.1.10:6443" || cfg["token"] != tok.Reveal() || cfg["node-name"] != "leaf-01" {
		t.Fatalf("config %v", cfg)
	}
	if a.Config.Mode != 0o600 || !a.Config.Secret {
		t.Fatal("k3s config is not a secret 0600 file")
	}
	bare, _ := tokens.ParseK3sToken("abcdef.0123456789abcdef")
	if _, err := RenderK3sAgent(K3sAgentParams{ServerURL: "https://10.99.1.10:6443", Token: bare}); err == nil {
		t.Fatal("unpinned token accepted")
	}
	if _, err := RenderK3sAgent(K3sAgentParams{ServerURL: "http://10.99.1.10:6443", Token: tok}); err == nil {
		t.Fatal("http server accepted")
	}
}

// TestNodeLabelsInKubeletExtraArgs: labels reach the kubelet's
// --node-labels, as a name/value list in v1beta4 and a map before.
func TestNodeLabelsInKubeletExtraArgs(t *testing.T) {
	labels := map[string]string{"ztpd.io/role": "worker", "label.ztpd.io/rack": "r7"}
	for v, want := range map[string]string{
		"1.31.4": "  kubeletExtraArgs:\n  - name: node-labels\n    value: label.ztpd.io/rack=r7,ztpd.io/role=worker\n",
		"1.28.4": "  kubeletExtraArgs:\n    node-labels: label.ztpd.io/rack=r7,ztpd.io/role=worker\n",
	} {
		plan, err := PlanJoin(JoinParams{Version: MustVersion(v), APIServerEndpoint: "10.99.1.10:6443", Token: tokA,
			CACertHashes: []string{"sha256:" + strings.Repeat("ab", 32)}, NodeName: "n1", NodeLabels: labels})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(plan.Config), want) {
			t.Errorf("%s: config lacks %q:\n%s", v, want, plan.Config)
		}
	}
}

// TestCloudConfigInstallsTheAgent: the device agent's files land in
// write_files byte for byte (PyYAML, cloud-init's loader, reads them the
// same), its timer is enabled last, and cloud-init's own schema check
// accepts the document.
func TestCloudConfigInstallsTheAgent(t *testing.T) {
	joinPlan, err := PlanJoin(JoinParams{Version: MustVersion("1.28.4"), APIServerEndpoint: "10.99.1.10:6443", Token: tokA, CACertHashes: []string{caHash}})
	if err != nil {
		t.Fatal(err)
	}
	agentFiles := []File{
		{Path: "/usr/local/bin/ztpd-agent", Mode: 0o755, Content: []byte("#!/usr/bin/env python3\n# a: 'b' \"c\" #d\nprint('x: y')\n\n\tindented\n")},
		{Path: "/etc/ztpd/agent.json", Mode: 0o600, Content: []byte(`{"credential": "ztpa1.aaaaaaaaaaaa.bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", "url": "https://10.99.0.1:8443/agent/v1"}`), Secret: true},
		{Path: "/etc/systemd/system/ztpd-agent.timer", Mode: 0o644, Content: []byte("[Timer]\nOnBootSec=30s\n")},
	}
	doc, err := RenderCloudConfig(CloudConfigParams{Role: RoleWorker, Plan: joinPlan, Agent: agentFiles})
	if err != nil {
		t.Fatal(err)
	}
	var cc cloudConfig
	if err := yaml3.Unmarshal(doc, &cc); err != nil {
		t.Fatal(err)
	}
	files := map[string]writeFile{}
	for _, f := range cc.WriteFiles {
		files[f.Path] = f
	}
	for _, f := range agentFiles {
		got := files[f.Path]
		if got.Content != string(f.Content) || got.Permissions != fmt.Sprintf("%04o", f.Mode) {
			t.Fatalf("agent file %s: %+v", f.Path, got)
		}
	}
	if last := cc.RunCmd[len(cc.RunCmd)-1]; last != "systemctl enable --now ztpd-agent.timer" {
		t.Fatalf("runcmd ends %q", last)
	}
	t.Run("PyYAML", func(t *testing.T) { pyYAMLAgrees(t, "agent", doc, cc) })
	t.Run("cloud-init schema", func(t *testing.T) {
		ci, err := exec.LookPath("cloud-init")
		if err != nil {
			t.Skip("cloud-init not installed: cannot run its schema check")
		}
		path := filepath.Join(t.TempDir(), "user-data")
		if err := os.WriteFile(path, doc, 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(ci, "schema", "--config-file", path).CombinedOutput(); err != nil {
			t.Fatalf("cloud-init schema: %v\n%s", err, out)
		}
	})
	if _, err := RenderCloudConfig(CloudConfigParams{Role: RoleWorker, Plan: joinPlan, Agent: []File{{Path: "relative/x"}}}); err == nil {
		t.Fatal("a relative agent file path was accepted")
	}
}

// TestIPv6ControlPlaneGetsIPv6ServiceRange: kube-apiserver refuses a
// Service range of the other family than its advertise address, so a first
// control plane on IPv6 (its advertise address, or the endpoint's address
// when it has none) gets an IPv6 range unless one is named; IPv4 and DNS
// endpoints keep kubeadm's default, in every configuration format.
func TestIPv6ControlPlaneGetsIPv6ServiceRange(t *testing.T) {
	for _, v := range []string{"1.14.10", "1.21.14", "1.30.9", "1.35.1"} {
		cases := []struct {
			name, endpoint, advertise, service, want string
		}{
			{"advertise v6", "[fd99::1:10]:6443", "fd99::1:11", "", DefaultIPv6ServiceSubnet},
			{"endpoint v6, no advertise", "[fd99::1:10]:6443", "", "", DefaultIPv6ServiceSubnet},
			{"named range kept", "[fd99::1:10]:6443", "fd99::1:11", "fd99:96::/112", "fd99:96::/112"},
			{"v4", "10.99.1.10:6443", "10.99.1.11", "", ""},
			{"dns endpoint", "api.lab.example:6443", "", "", ""},
			{"v4-mapped", "[::ffff:10.99.1.10]:6443", "", "", ""},
		}
		for _, c := range cases {
			p := initParams(v, pki.RSA2048)
			p.ControlPlaneEndpoint, p.AdvertiseAddress, p.ServiceSubnet, p.PodSubnet = c.endpoint, c.advertise, c.service, ""
			plan, err := PlanInit(p)
			if err != nil {
				t.Fatalf("%s %s: %v", v, c.name, err)
			}
			text := string(plan.Config) + strings.Join(flatten(plan.Commands), " ")
			has := strings.Contains(text, "serviceSubnet: "+c.want) || strings.Contains(text, "--service-cidr "+c.want)
			switch {
			case c.want != "" && !has:
				t.Errorf("%s %s: no service range %s in\n%s", v, c.name, c.want, text)
			case c.want == "" && (strings.Contains(text, "serviceSubnet") || strings.Contains(text, "--service-cidr")):
				t.Errorf("%s %s: a service range where kubeadm's default should stay:\n%s", v, c.name, text)
			}
		}
	}
}

func flatten(cmds [][]string) []string {
	var out []string
	for _, c := range cmds {
		out = append(out, c...)
	}
	return out
}
