// Command kwok is the Kubernetes project's kubelet stand-in (sigs.k8s.io/kwok), built from Go
// modules: it gives nodewright's simulated nodes heartbeats (Leases) and their pods a lifecycle
// (Running, Ready, deletion) as configured by Stage documents.
package main

import (
	"os"

	"github.com/spf13/pflag"

	"sigs.k8s.io/kwok/pkg/config"
	"sigs.k8s.io/kwok/pkg/kwok/cmd"
	"sigs.k8s.io/kwok/pkg/log"
	"sigs.k8s.io/kwok/pkg/utils/signals"
)

func main() {
	flags := pflag.NewFlagSet("global", pflag.ContinueOnError)
	flags.ParseErrorsAllowlist.UnknownFlags = true
	flags.Usage = func() {}
	ctx, logger := log.InitFlags(signals.SetupSignalContext(), flags)
	ctx, err := config.InitFlags(ctx, flags)
	if err != nil {
		logger.Error("Failed to read the configuration flags", "err", err)
		os.Exit(1)
	}
	command := cmd.NewCommand(ctx)
	command.PersistentFlags().AddFlagSet(flags)
	if err := command.ExecuteContext(ctx); err != nil {
		logger.Error("Exited", "err", err)
		os.Exit(1)
	}
}
