package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"time"

	"github.com/spf13/cobra"
	appsv1 "k8s.io/api/apps/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/converge-dev/converge/cmd/converge/internal/installer"
)

// versionInfo is what "converge version -o json|yaml" prints.
type versionInfo struct {
	Client clientVersion  `json:"client"`
	Daemon *daemonVersion `json:"daemon,omitempty"`
}

type clientVersion struct {
	Version   string `json:"version"`
	GoVersion string `json:"goVersion"`
	Platform  string `json:"platform"`
}

// daemonVersion describes the daemon "converge install" deployed: its Deployment's image.
type daemonVersion struct {
	// Version is the image's tag ("v0.1.0"), "" when the image has none.
	Version   string `json:"version"`
	Image     string `json:"image"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Ready     string `json:"ready"`
}

// versionLine is the client's version as "converge --version" and "converge version
// --client" print it.
func versionLine() string { return "converge: " + version }

func newVersionCommand(kube *kubeFlags) *cobra.Command {
	var client bool
	var output string
	cmd := &cobra.Command{
		Use:   "version",
		Short: "Print the version of converge and of the daemon in the cluster",
		Long: `Version prints this binary's version and, unless --client, the version of the daemon
"converge install" deployed (the image of the Deployment converge-system/converge), as
"kubectl version" and "flux version" do. Without a reachable cluster it prints the client's
line and exits 2 with what to do; --client never asks the cluster.`,
		Example: `  converge version
  converge version --client          # this binary only, for scripts: $(converge version --client)
  converge version -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			switch output {
			case "", "json", "yaml":
			default:
				return &exitError{code: exitCodeError, err: fmt.Errorf("--output %q: want json or yaml", output)}
			}
			info := versionInfo{Client: clientVersion{Version: version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}}
			var derr error
			if !client {
				info.Daemon, derr = readDaemonVersion(cmd.Context(), kube)
			}
			if err := printVersion(cmd.OutOrStdout(), info, output, client); err != nil {
				return &exitError{code: exitCodeError, err: err}
			}
			if derr != nil {
				return &exitError{code: exitCodeError, err: derr}
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&client, "client", false, "print this binary's version only; do not ask the cluster")
	cmd.Flags().StringVarP(&output, "output", "o", "", "output format: json or yaml (default: lines for people)")
	return cmd
}

func printVersion(w io.Writer, info versionInfo, output string, client bool) error {
	if output != "" {
		return writeStructured(w, info, output)
	}
	if _, err := fmt.Fprintln(w, versionLine()); err != nil || client {
		return err
	}
	d := info.Daemon
	switch {
	case d == nil:
		_, err := fmt.Fprintln(w, "daemon: unknown")
		return err
	case d.Image == "":
		_, err := fmt.Fprintf(w, "daemon: not installed in %s (converge install)\n", installer.Namespace)
		return err
	}
	v := d.Version
	if v == "" {
		v = d.Image
	}
	_, err := fmt.Fprintf(w, "daemon: %s (%s, Deployment %s/%s, %s ready)\n", v, d.Image, d.Namespace, d.Name, d.Ready)
	return err
}

// readDaemonVersion reads the installed daemon's Deployment: a daemonVersion without an
// image when there is none, an error saying what to do when the cluster cannot be asked.
func readDaemonVersion(ctx context.Context, kube *kubeFlags) (*daemonVersion, error) {
	cfg, err := kube.restConfig()
	if err != nil {
		return nil, err
	}
	cfg.Timeout = 15 * time.Second
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dep, err := cs.AppsV1().Deployments(installer.Namespace).Get(ctx, installer.DaemonName, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return &daemonVersion{Namespace: installer.Namespace, Name: installer.DaemonName}, nil
	case err != nil:
		return nil, explain(fmt.Errorf("daemon version: %w", err), nil)
	}
	return describeDaemon(dep), nil
}

// describeDaemon returns the version of the container of dep that runs the Converge image
// (the first container when none does).
func describeDaemon(dep *appsv1.Deployment) *daemonVersion {
	d := &daemonVersion{Namespace: dep.Namespace, Name: dep.Name,
		Ready: fmt.Sprintf("%d/%d", dep.Status.ReadyReplicas, dep.Status.Replicas)}
	for i, c := range dep.Spec.Template.Spec.Containers {
		if i == 0 || installer.ImageName(c.Image) == installer.BaseImage {
			d.Image = c.Image
		}
	}
	if name := installer.ImageName(d.Image); len(d.Image) > len(name)+1 && d.Image[len(name)] == ':' {
		d.Version = d.Image[len(name)+1:]
	}
	if d.Image == "" {
		d.Image = "?"
	}
	return d
}
