package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/cmd/converge/internal/installer"
	"github.com/converge-dev/converge/inventory"
)

// uninstallFlags are the flags of "converge uninstall".
type uninstallFlags struct {
	yes     bool
	timeout time.Duration
}

const uninstallWarning = `WARNING: converge uninstall removes the daemon and everything "converge install" applied:
  1. the Deployment converge-system/converge, first, and waits for its pods to stop, so no
     daemon acts during the rest;
  2. the finalizer converge.dev/finalizer from every Sync (%s), so that
  3. deleting the CRD syncs.converge.dev does not hang: it deletes EVERY Sync in the cluster;
  4. the RBAC (ClusterRoles converge and converge-apply, their bindings, the ServiceAccount),
     the metrics Service, and last the namespace converge-system.
Objects that Syncs applied are ORPHANED, NOT DELETED: the deletionPolicy of a Sync is carried
out by the daemon, which is gone, so those objects stay as they are, together with each Sync's
inventory ConfigMap (<sync>-inventory in the Sync's namespace). To delete them instead, delete
the Syncs (deletionPolicy: Delete) and wait until they are gone BEFORE you uninstall.
ClusterRoles you labelled rbac.converge.dev/aggregate-to-apply are not part of the base and stay.
`

func newUninstallCommand(kube *kubeFlags) *cobra.Command {
	var f uninstallFlags
	cmd := &cobra.Command{
		Use:   "uninstall",
		Short: "Remove what \"converge install\" installed; objects applied by Syncs are orphaned",
		Long: fmt.Sprintf(uninstallWarning, "in every namespace") + `
It asks for confirmation on a terminal; elsewhere it needs --yes. A daemon running outside the
cluster (converge run on a laptop) must be stopped first: it would put the finalizers back.`,
		Example: `  converge uninstall        # shows the warning and asks
  converge uninstall --yes  # scripts`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return f.run(cmd, kube) },
	}
	cmd.Flags().BoolVar(&f.yes, "yes", false, "do not ask for confirmation")
	cmd.Flags().DurationVar(&f.timeout, "timeout", 2*time.Minute, "how long to wait for the daemon's pods and the CRD to go")
	return cmd
}

// errNotConfirmed is an uninstall that was refused or not confirmed.
var errNotConfirmed = errors.New("uninstall not confirmed: nothing was removed")

func (f *uninstallFlags) run(cmd *cobra.Command, kube *kubeFlags) error {
	fail := func(err error) error { return &exitError{code: exitCodeError, err: err} }
	stderr := cmd.ErrOrStderr()
	if !f.yes && !isTerminal(cmd.InOrStdin()) {
		fmt.Fprintf(stderr, uninstallWarning, "in every namespace")
		return fail(fmt.Errorf("%w; stdin is not a terminal, so re-run with --yes once you have read the warning above", errNotConfirmed))
	}
	ctx := cmd.Context()
	c, eng, err := kube.clientAndEngine()
	if err != nil {
		return fail(err)
	}
	// Read only until confirmed: under a legacy ID until installer.Uninstall migrates it.
	mopts := inventory.DefaultMigrateOptions()
	mopts.DryRun = true
	ref, err := eng.Migrate(ctx, installer.Ref, mopts)
	if err != nil {
		return fail(err)
	}
	inv, err := eng.Inventory(ctx, ref)
	if err != nil {
		return fail(err)
	}
	if inv.Len() == 0 {
		return fail(fmt.Errorf("nothing to uninstall: there is no inventory %s; a base applied with kubectl apply -k is removed with kubectl delete -k (docs/deploy.md)", installer.Ref))
	}
	syncs, err := installer.ListSyncs(ctx, c)
	if err != nil {
		return fail(err)
	}
	fmt.Fprintf(stderr, uninstallWarning, installer.DescribeSyncs(syncs))
	if !f.yes && !confirm(cmd.InOrStdin(), stderr) {
		return fail(errNotConfirmed)
	}
	res, uninstallErr := installer.Uninstall(ctx, c, eng, f.timeout)
	if err := newReport(baseRevision(), false, res, uninstallErr).write(cmd.OutOrStdout(), ""); err != nil {
		return fail(err)
	}
	if uninstallErr != nil {
		return fail(uninstallErr)
	}
	fmt.Fprintln(cmd.OutOrStdout(), "Uninstalled. Objects applied by Syncs, and their <sync>-inventory ConfigMaps, were left in place (orphaned).")
	return nil
}

// confirm asks on w and reads one line from r; only "yes" confirms.
func confirm(r io.Reader, w io.Writer) bool {
	fmt.Fprint(w, `Type "yes" to uninstall: `)
	line, _ := bufio.NewReader(r).ReadString('\n')
	return strings.TrimSpace(line) == "yes"
}
