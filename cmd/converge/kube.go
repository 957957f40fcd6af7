package main

import (
	"fmt"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/internal/scheme"
	"github.com/converge-dev/converge/engine"
)

// kubeFlags are the standard kubectl connection flags (--kubeconfig, --context, -n, ...),
// honouring KUBECONFIG and in-cluster configuration.
type kubeFlags struct {
	*genericclioptions.ConfigFlags
}

func addKubeFlags(cmd *cobra.Command) *kubeFlags {
	f := &kubeFlags{genericclioptions.NewConfigFlags(true)}
	f.AddFlags(cmd.PersistentFlags())
	return f
}

// restConfig returns the client configuration with generous client-side rate limits: the
// API server's priority and fairness is the real limiter.
func (f *kubeFlags) restConfig() (*rest.Config, error) {
	cfg, err := f.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w (set --kubeconfig or KUBECONFIG)", err)
	}
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 200, 400
	cfg.UserAgent = "converge/" + version
	return cfg, nil
}

// serverVersion returns the API server's git version ("v1.36.3"), or "" when it cannot be
// read (the apply that follows reports an unreachable cluster).
func (f *kubeFlags) serverVersion() string {
	cfg, err := f.restConfig()
	if err != nil {
		return ""
	}
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return ""
	}
	info, err := dc.ServerVersion()
	if err != nil {
		return ""
	}
	return info.GitVersion
}

// namespace returns -n, else the kubeconfig context's namespace, else "default".
func (f *kubeFlags) namespace() string {
	ns, _, err := f.ToRawKubeConfigLoader().Namespace()
	if err != nil || ns == "" {
		return "default"
	}
	return ns
}

// syncClient returns a controller-runtime client that knows Syncs.
func (f *kubeFlags) syncClient() (client.Client, error) {
	cfg, err := f.restConfig()
	if err != nil {
		return nil, err
	}
	return newSyncClient(cfg)
}

func newSyncClient(cfg *rest.Config) (client.Client, error) {
	return client.New(cfg, client.Options{Scheme: scheme.New()})
}

// clientAndEngine returns a client that knows Syncs and a one-shot engine (no watch cache:
// a CLI run is too short to profit from one) for the CLI verbs that apply or delete.
func (f *kubeFlags) clientAndEngine() (client.Client, *engine.Engine, error) {
	cfg, err := f.restConfig()
	if err != nil {
		return nil, nil, err
	}
	c, err := newSyncClient(cfg)
	if err != nil {
		return nil, nil, err
	}
	eng, err := engine.New(cfg, engine.Options{})
	return c, eng, err
}
