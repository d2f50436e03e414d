package main

import (
	"fmt"
	"net/url"
	"os"
	"strconv"

	"github.com/spf13/cobra"

	"github.com/ztpd/ztpd/api/client"
)

// newClusterRegisterCmd registers an existing cluster (CloudStack's
// clustertype=ExternalManaged).
func newClusterRegisterCmd(opts *rootOptions, f *apiFlags) *cobra.Command {
	var kubeconfigFile, version, description string
	var size int
	cmd := &cobra.Command{
		Use:   "register NAME --kubeconfig FILE",
		Short: "Register an existing cluster ztpd did not build, to onboard devices into it",
		Long: `Register an existing Kubernetes cluster (CloudStack's clustertype=ExternalManaged)
from a kubeconfig whose identity is bound to ztpd's onboarding role
(docs/examples/ztpd-onboarder-rbac.yaml: create Secrets in kube-system, read
kube-public/cluster-info, nodes get/list/watch/patch, CSRs read).

ztpd checks the kubeconfig against the API server (it answers, the CA its
cluster-info publishes verifies it and is pinned, the identity has every
right of the role), then stores the kubeconfig sealed: it is never shown or
logged again. Devices whose profile names the cluster then join as workers
and switches: ztpd mints each a short-lived bootstrap token through that API
server; VMs run kubeadm join with the token and the pinned CA's hash,
switches get a bootstrap kubeconfig for their kubelet, and the cluster's own
controller signs their kubelet certificates. ztpd never holds the cluster's
CA key, so it issues no kubeconfig for it and does not scale, upgrade, stop or
start it; delete only unregisters it (its Nodes stay).

VMs install the Kubernetes version of the API server (added first with ztpd
kube-version add), or the one --version names (same minor version).`,
		Example: `  kubectl apply -f docs/examples/ztpd-onboarder-rbac.yaml
  ztpd cluster register lab-b --kubeconfig lab-b-onboarder.kubeconfig
  ztpd cluster register lab-b --kubeconfig lab-b.kubeconfig --size 20 -o json
  ztpd cluster list --type ExternalManaged`,
		Args: oneArg,
		RunE: func(cmd *cobra.Command, args []string) error {
			kc, err := os.ReadFile(kubeconfigFile)
			if err != nil {
				return fmt.Errorf("reading the kubeconfig: %w", err)
			}
			c, err := newAPIClient(opts, f)
			if err != nil {
				return err
			}
			var zones []client.CSZone
			if err := c.CSList("listZones", "zone", nil, &zones); err != nil {
				return err
			}
			if len(zones) == 0 {
				return fmt.Errorf("the API lists no zone")
			}
			p := url.Values{"name": {args[0]}, "zoneid": {zones[0].ID}, "clustertype": {"ExternalManaged"},
				"kubeconfig": {string(kc)}, "size": {strconv.Itoa(size)}}
			if version != "" {
				vid, err := versionID(c, version)
				if err != nil {
					return err
				}
				p.Set("kubernetesversionid", vid)
			}
			if description != "" {
				p.Set("description", description)
			}
			return clusterJob(opts, f, c, "createKubernetesCluster", p, "registering "+args[0])
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&kubeconfigFile, "kubeconfig", "", "kubeconfig of an identity bound to ztpd's onboarding role (required; inline certificate or token only)")
	fl.StringVar(&version, "version", "", "Kubernetes version VMs install: name, semantic version or ID (default: the API server's)")
	fl.IntVar(&size, "size", 0, "most devices ztpd onboards into the cluster (0: no cap)")
	fl.StringVar(&description, "description", "", "description")
	_ = cmd.MarkFlagRequired("kubeconfig")
	return cmd
}
