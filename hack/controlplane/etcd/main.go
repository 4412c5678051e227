// Command etcd is the upstream etcd server, built from Go modules for nodewright's local
// control plane.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
