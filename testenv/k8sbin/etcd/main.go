// Command etcd is the real etcd server (go.etcd.io/etcd/server/v3's
// etcdmain), built here because no etcd binary can be downloaded. It takes
// the flags kubeadm writes into its etcd manifest.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
