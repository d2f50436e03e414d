//go:build tools

// Package tools pins the commands build.sh compiles in this module: the
// hollow node and the scheduler that lands pods on it. They live in a module
// of their own so adding them leaves the control-plane build's go.sum, and
// so its cache entry, unchanged.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubemark"
)
