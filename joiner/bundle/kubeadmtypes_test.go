package bundle

// Strict mirrors of kubeadm's configuration types, one set per API
// version, with every field upstream defines (kubernetes
// cmd/kubeadm/app/apis/kubeadm/v1beta{2,3,4}/types.go). Rendered configs are
// decoded into these with unknown fields refused, the way kubeadm's strict
// decoding does, so a field name typo or a field from the wrong API version
// fails the test.

type kTypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

type kBootstrapToken struct {
	Token       string   `json:"token"`
	Description string   `json:"description,omitempty"`
	TTL         string   `json:"ttl,omitempty"`
	Expires     string   `json:"expires,omitempty"`
	Usages      []string `json:"usages,omitempty"`
	Groups      []string `json:"groups,omitempty"`
}

type kAPIEndpoint struct {
	AdvertiseAddress string `json:"advertiseAddress,omitempty"`
	BindPort         int32  `json:"bindPort,omitempty"`
}

type kTaint struct {
	Key       string `json:"key"`
	Value     string `json:"value,omitempty"`
	Effect    string `json:"effect"`
	TimeAdded string `json:"timeAdded,omitempty"`
}

type kPatches struct {
	Directory string `json:"directory,omitempty"`
}

type kArg struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type kHostPathMount struct {
	Name      string `json:"name"`
	HostPath  string `json:"hostPath"`
	MountPath string `json:"mountPath"`
	ReadOnly  bool   `json:"readOnly,omitempty"`
	PathType  string `json:"pathType,omitempty"`
}

type kImageMeta struct {
	ImageRepository string `json:"imageRepository,omitempty"`
	ImageTag        string `json:"imageTag,omitempty"`
}

type kNetworking struct {
	ServiceSubnet string `json:"serviceSubnet,omitempty"`
	PodSubnet     string `json:"podSubnet,omitempty"`
	DNSDomain     string `json:"dnsDomain,omitempty"`
}

type kExternalEtcd struct {
	Endpoints []string `json:"endpoints"`
	CAFile    string   `json:"caFile"`
	CertFile  string   `json:"certFile"`
	KeyFile   string   `json:"keyFile"`
}

type kFileDiscovery struct {
	KubeConfigPath string `json:"kubeConfigPath"`
}

type kBootstrapTokenDiscovery struct {
	Token                    string   `json:"token"`
	APIServerEndpoint        string   `json:"apiServerEndpoint,omitempty"`
	CACertHashes             []string `json:"caCertHashes,omitempty"`
	UnsafeSkipCAVerification bool     `json:"unsafeSkipCAVerification,omitempty"`
}

// --- v1beta2 and v1beta3 (extraArgs are maps) ---

type kNodeRegistrationV1B3 struct {
	Name                  string            `json:"name,omitempty"`
	CRISocket             string            `json:"criSocket,omitempty"`
	Taints                []kTaint          `json:"taints"`
	KubeletExtraArgs      map[string]string `json:"kubeletExtraArgs,omitempty"`
	IgnorePreflightErrors []string          `json:"ignorePreflightErrors,omitempty"`
	ImagePullPolicy       string            `json:"imagePullPolicy,omitempty"` // v1beta3 only
}

type kInitConfigurationV1B3 struct {
	kTypeMeta        `json:",inline"`
	BootstrapTokens  []kBootstrapToken     `json:"bootstrapTokens,omitempty"`
	NodeRegistration kNodeRegistrationV1B3 `json:"nodeRegistration,omitempty"`
	LocalAPIEndpoint kAPIEndpoint          `json:"localAPIEndpoint,omitempty"`
	CertificateKey   string                `json:"certificateKey,omitempty"`
	SkipPhases       []string              `json:"skipPhases,omitempty"` // v1beta3 only
	Patches          *kPatches             `json:"patches,omitempty"`    // v1beta3 only
}

type kControlPlaneComponentV1B3 struct {
	ExtraArgs    map[string]string `json:"extraArgs,omitempty"`
	ExtraVolumes []kHostPathMount  `json:"extraVolumes,omitempty"`
}

type kAPIServerV1B3 struct {
	kControlPlaneComponentV1B3 `json:",inline"`
	CertSANs                   []string `json:"certSANs,omitempty"`
	TimeoutForControlPlane     string   `json:"timeoutForControlPlane,omitempty"`
}

type kLocalEtcdV1B3 struct {
	kImageMeta     `json:",inline"`
	DataDir        string            `json:"dataDir"`
	ExtraArgs      map[string]string `json:"extraArgs,omitempty"`
	ServerCertSANs []string          `json:"serverCertSANs,omitempty"`
	PeerCertSANs   []string          `json:"peerCertSANs,omitempty"`
}

type kEtcdV1B3 struct {
	Local    *kLocalEtcdV1B3 `json:"local,omitempty"`
	External *kExternalEtcd  `json:"external,omitempty"`
}

type kDNSV1B3 struct {
	kImageMeta `json:",inline"`
}

type kClusterConfigurationV1B3 struct {
	kTypeMeta            `json:",inline"`
	Etcd                 kEtcdV1B3                  `json:"etcd,omitempty"`
	Networking           kNetworking                `json:"networking,omitempty"`
	KubernetesVersion    string                     `json:"kubernetesVersion,omitempty"`
	ControlPlaneEndpoint string                     `json:"controlPlaneEndpoint,omitempty"`
	APIServer            kAPIServerV1B3             `json:"apiServer,omitempty"`
	ControllerManager    kControlPlaneComponentV1B3 `json:"controllerManager,omitempty"`
	Scheduler            kControlPlaneComponentV1B3 `json:"scheduler,omitempty"`
	DNS                  kDNSV1B3                   `json:"dns,omitempty"`
	CertificatesDir      string                     `json:"certificatesDir,omitempty"`
	ImageRepository      string                     `json:"imageRepository,omitempty"`
	FeatureGates         map[string]bool            `json:"featureGates,omitempty"`
	ClusterName          string                     `json:"clusterName,omitempty"`
}

type kJoinControlPlane struct {
	LocalAPIEndpoint kAPIEndpoint `json:"localAPIEndpoint,omitempty"`
	CertificateKey   string       `json:"certificateKey,omitempty"`
}

type kDiscoveryV1B3 struct {
	BootstrapToken    *kBootstrapTokenDiscovery `json:"bootstrapToken,omitempty"`
	File              *kFileDiscovery           `json:"file,omitempty"`
	TLSBootstrapToken string                    `json:"tlsBootstrapToken,omitempty"`
	Timeout           string                    `json:"timeout,omitempty"`
}

type kJoinConfigurationV1B3 struct {
	kTypeMeta        `json:",inline"`
	NodeRegistration kNodeRegistrationV1B3 `json:"nodeRegistration,omitempty"`
	CACertPath       string                `json:"caCertPath,omitempty"`
	Discovery        kDiscoveryV1B3        `json:"discovery"`
	ControlPlane     *kJoinControlPlane    `json:"controlPlane,omitempty"`
	SkipPhases       []string              `json:"skipPhases,omitempty"`
	Patches          *kPatches             `json:"patches,omitempty"`
}

// --- v1beta4 (extraArgs are lists, timeouts, encryptionAlgorithm) ---

type kNodeRegistrationV1B4 struct {
	Name                  string   `json:"name,omitempty"`
	CRISocket             string   `json:"criSocket,omitempty"`
	Taints                []kTaint `json:"taints"`
	KubeletExtraArgs      []kArg   `json:"kubeletExtraArgs,omitempty"`
	IgnorePreflightErrors []string `json:"ignorePreflightErrors,omitempty"`
	ImagePullPolicy       string   `json:"imagePullPolicy,omitempty"`
	ImagePullSerial       *bool    `json:"imagePullSerial,omitempty"`
}

type kTimeouts struct {
	ControlPlaneComponentHealthCheck string `json:"controlPlaneComponentHealthCheck,omitempty"`
	KubeletHealthCheck               string `json:"kubeletHealthCheck,omitempty"`
	KubernetesAPICall                string `json:"kubernetesAPICall,omitempty"`
	EtcdAPICall                      string `json:"etcdAPICall,omitempty"`
	TLSBootstrap                     string `json:"tlsBootstrap,omitempty"`
	Discovery                        string `json:"discovery,omitempty"`
	UpgradeManifests                 string `json:"upgradeManifests,omitempty"`
}

type kInitConfigurationV1B4 struct {
	kTypeMeta        `json:",inline"`
	BootstrapTokens  []kBootstrapToken     `json:"bootstrapTokens,omitempty"`
	DryRun           bool                  `json:"dryRun,omitempty"`
	NodeRegistration kNodeRegistrationV1B4 `json:"nodeRegistration,omitempty"`
	LocalAPIEndpoint kAPIEndpoint          `json:"localAPIEndpoint,omitempty"`
	CertificateKey   string                `json:"certificateKey,omitempty"`
	SkipPhases       []string              `json:"skipPhases,omitempty"`
	Patches          *kPatches             `json:"patches,omitempty"`
	Timeouts         *kTimeouts            `json:"timeouts,omitempty"`
}

type kEnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value,omitempty"`
}

type kControlPlaneComponentV1B4 struct {
	ExtraArgs    []kArg           `json:"extraArgs,omitempty"`
	ExtraVolumes []kHostPathMount `json:"extraVolumes,omitempty"`
	ExtraEnvs    []kEnvVar        `json:"extraEnvs,omitempty"`
}

type kAPIServerV1B4 struct {
	kControlPlaneComponentV1B4 `json:",inline"`
	CertSANs                   []string `json:"certSANs,omitempty"`
}

type kLocalEtcdV1B4 struct {
	kImageMeta     `json:",inline"`
	DataDir        string    `json:"dataDir"`
	ExtraArgs      []kArg    `json:"extraArgs,omitempty"`
	ExtraEnvs      []kEnvVar `json:"extraEnvs,omitempty"`
	ServerCertSANs []string  `json:"serverCertSANs,omitempty"`
	PeerCertSANs   []string  `json:"peerCertSANs,omitempty"`
}

type kEtcdV1B4 struct {
	Local    *kLocalEtcdV1B4 `json:"local,omitempty"`
	External *kExternalEtcd  `json:"external,omitempty"`
}

type kDNSV1B4 struct {
	kImageMeta `json:",inline"`
	Disabled   bool `json:"disabled,omitempty"`
}

type kProxyV1B4 struct {
	Disabled bool `json:"disabled,omitempty"`
}

type kClusterConfigurationV1B4 struct {
	kTypeMeta                   `json:",inline"`
	Etcd                        kEtcdV1B4                  `json:"etcd,omitempty"`
	Networking                  kNetworking                `json:"networking,omitempty"`
	KubernetesVersion           string                     `json:"kubernetesVersion,omitempty"`
	ControlPlaneEndpoint        string                     `json:"controlPlaneEndpoint,omitempty"`
	APIServer                   kAPIServerV1B4             `json:"apiServer,omitempty"`
	ControllerManager           kControlPlaneComponentV1B4 `json:"controllerManager,omitempty"`
	Scheduler                   kControlPlaneComponentV1B4 `json:"scheduler,omitempty"`
	DNS                         kDNSV1B4                   `json:"dns,omitempty"`
	Proxy                       kProxyV1B4                 `json:"proxy,omitempty"`
	CertificatesDir             string                     `json:"certificatesDir,omitempty"`
	ImageRepository             string                     `json:"imageRepository,omitempty"`
	FeatureGates                map[string]bool            `json:"featureGates,omitempty"`
	ClusterName                 string                     `json:"clusterName,omitempty"`
	EncryptionAlgorithm         string                     `json:"encryptionAlgorithm,omitempty"`
	CertificateValidityPeriod   string                     `json:"certificateValidityPeriod,omitempty"`
	CACertificateValidityPeriod string                     `json:"caCertificateValidityPeriod,omitempty"`
}

type kDiscoveryV1B4 struct {
	BootstrapToken    *kBootstrapTokenDiscovery `json:"bootstrapToken,omitempty"`
	File              *kFileDiscovery           `json:"file,omitempty"`
	TLSBootstrapToken string                    `json:"tlsBootstrapToken,omitempty"`
}

type kJoinConfigurationV1B4 struct {
	kTypeMeta        `json:",inline"`
	DryRun           bool                  `json:"dryRun,omitempty"`
	NodeRegistration kNodeRegistrationV1B4 `json:"nodeRegistration,omitempty"`
	CACertPath       string                `json:"caCertPath,omitempty"`
	Discovery        kDiscoveryV1B4        `json:"discovery"`
	ControlPlane     *kJoinControlPlane    `json:"controlPlane,omitempty"`
	SkipPhases       []string              `json:"skipPhases,omitempty"`
	Patches          *kPatches             `json:"patches,omitempty"`
	Timeouts         *kTimeouts            `json:"timeouts,omitempty"`
}
