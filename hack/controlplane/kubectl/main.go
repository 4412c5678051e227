// Command kubectl is the upstream Kubernetes CLI, built from Go modules so that the local
// environment can be inspected (kubectl get ...) and kustomizations rendered without downloads.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
