package main

import (
	"errors"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

// exitError carries a process exit code through cobra's error return.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// exitCode maps an error to the process exit code: 2 for errors unless a verb chose another
// (kubectl diff and flux diff use 1 for "changes found", >1 for errors).
func exitCode(err error) int {
	var ee *exitError
	if errors.As(err, &ee) {
		return ee.code
	}
	return 2
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "converge",
		Short: "Keep a Kubernetes cluster equal to what a git repository declares",
		Long: `Converge is a GitOps apply engine for Kubernetes. It renders kustomizations, Helm charts
or plain YAML from git, OCI artifacts, Helm repositories or a local folder, applies them with
server-side apply, tracks what it owns in an inventory, prunes what left the source, and
reports readiness.`,
		SilenceUsage:  true,
		SilenceErrors: true,
		Version:       version,
	}
	kube := addKubeFlags(root)
	// "converge --version" prints what "converge version --client" prints.
	root.SetVersionTemplate("converge: {{.Version}}\n")
	root.AddCommand(newVersionCommand(kube))
	root.AddCommand(newBuildCommand())
	root.AddCommand(newCheckCommand())
	root.AddCommand(newRunCommand(kube))
	root.AddCommand(newApplyCommand(kube))
	root.AddCommand(newDeleteCommand(kube))
	root.AddCommand(newInstallCommand(kube))
	root.AddCommand(newUninstallCommand(kube))
	root.AddCommand(newStatusCommand(kube))
	root.AddCommand(newGetCommand(kube))
	root.AddCommand(newReconcileCommand(kube))
	root.AddCommand(newHistoryCommand(kube))
	root.AddCommand(newRollbackCommand(kube))
	root.AddCommand(newTreeCommand(kube))
	root.AddCommand(newEventsCommand(kube))
	root.AddCommand(newTraceCommand(kube))
	root.AddCommand(newSuspendCommand(kube))
	root.AddCommand(newResumeCommand(kube))
	root.AddCommand(newDiffCommand(kube))
	root.AddCommand(newMigrateCommand(kube))
	registerFlagCompletions(root, kube)
	return root
}
