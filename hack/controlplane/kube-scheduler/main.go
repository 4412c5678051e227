// Command kube-scheduler is the upstream Kubernetes scheduler, built from Go modules so that pods
// in nodewright's local cluster are placed on nodes the way a real cluster places them.
package main

import (
	"os"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/kubernetes/cmd/kube-scheduler/app"
)

func main() {
	os.Exit(cli.Run(app.NewSchedulerCommand()))
}
