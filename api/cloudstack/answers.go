package cloudstack

import "github.com/ztpd/ztpd/api/client"

// The answers of commands whose objects no Go client decodes into a type
// of its own (the objects they carry are api/client's). Fields are in JSON
// name order: they were maps, which encode sorted, and clients have seen
// them so.

// jobStarted is an asynchronous command's answer; create's carries the
// new cluster's ID too.
type jobStarted struct {
	ID    string `json:"id,omitempty"`
	JobID string `json:"jobid"`
}

// versionAnswer carries one kubernetessupportedversion.
type versionAnswer struct {
	Version client.CSVersion `json:"kubernetessupportedversion"`
}

// clusterAnswer is a cluster job's result: the cluster as it ended.
type clusterAnswer struct {
	Cluster client.CSCluster `json:"kubernetescluster"`
}

// clusterConfigAnswer is getKubernetesClusterConfig's answer.
type clusterConfigAnswer struct {
	ClusterConfig client.CSClusterConfig `json:"clusterconfig"`
}

// jobSuccess is the result of a job that ended with no object to show;
// DisplayText says what it did.
type jobSuccess struct {
	DisplayText string `json:"displaytext,omitempty"`
	Success     bool   `json:"success"`
}

// jobFailure is a failed job's result.
type jobFailure struct {
	ErrorCode int    `json:"errorcode"`
	ErrorText string `json:"errortext"`
}

// capabilityAnswer is listCapabilities' answer.
type capabilityAnswer struct {
	Capability capability `json:"capability"`
}

// capability is what ztpd tells CloudStack clients it supports.
type capability struct {
	AllowUserCreateProjects                      bool   `json:"allowusercreateprojects"`
	APILimitInterval                             int    `json:"apilimitinterval"`
	APILimitMax                                  int    `json:"apilimitmax"`
	CloudStackVersion                            string `json:"cloudstackversion"`
	KubernetesClusterExperimentalFeaturesEnabled bool   `json:"kubernetesclusterexperimentalfeaturesenabled"`
	KubernetesServiceEnabled                     bool   `json:"kubernetesserviceenabled"`
	UserPublicTemplateEnabled                    bool   `json:"userpublictemplateenabled"`
}
