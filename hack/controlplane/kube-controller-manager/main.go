// Command kube-controller-manager is the upstream Kubernetes controller manager, built from Go
// modules so that nodewright's local cluster runs the real controllers (deployments, replica
// sets, disruption budgets, garbage collection, node lifecycle, namespaces, service accounts).
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/cmd/kube-controller-manager/app"
)

func main() {
	os.Exit(cli.Run(app.NewControllerManagerCommand()))
}
