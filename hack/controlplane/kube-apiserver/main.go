// Command kube-apiserver is the upstream Kubernetes API server, built from Go modules so that
// nodewright's tests and local demo run against the real thing without a container engine.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	os.Exit(cli.Run(app.NewAPIServerCommand()))
}
