//go:build deps

// Package deps pins the project's chosen libraries in go.mod while the packages
// that use them are being written; `go mod tidy` keeps what is listed here.
package deps

import (
	_ "github.com/diskfs/go-diskfs"
	_ "github.com/diskfs/go-diskfs/filesystem/iso9660"
	_ "github.com/gin-gonic/gin"
	_ "github.com/insomniacslk/dhcp/dhcpv4"
	_ "github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	_ "github.com/insomniacslk/dhcp/dhcpv4/server4"
	_ "github.com/pin/tftp/v3"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/prometheus/client_golang/prometheus/promhttp"
	_ "github.com/schollz/progressbar/v3"
	_ "github.com/spf13/cobra"
	_ "go.etcd.io/bbolt"
	_ "go.yaml.in/yaml/v3"
	_ "golang.org/x/sys/unix"
	_ "golang.org/x/time/rate"
	_ "k8s.io/client-go/tools/clientcmd"
	_ "k8s.io/client-go/tools/clientcmd/api"
	_ "k8s.io/cluster-bootstrap/token/api"
	_ "k8s.io/cluster-bootstrap/token/util"
)
