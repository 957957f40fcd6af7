package main

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Dynamic shell completion (cobra's __complete, behind `converge completion bash|zsh|fish`):
// Sync names for status, get, reconcile and the verbs about one Sync (history, tree, events,
// suspend, resume, diff); namespaces for -n; contexts for --context. A completion asks the
// cluster at most once, bounded by completionTimeout: with the cluster unreachable it offers
// nothing, at once, and prints no error into the user's command line.

// completionTimeout bounds the request a completion makes.
const completionTimeout = 3 * time.Second

// completeSyncNames completes the names of the Syncs in the namespace -n (or the context's),
// those not given yet; maxArgs > 0 stops after that many arguments.
func completeSyncNames(kube *kubeFlags, maxArgs int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if maxArgs > 0 && len(args) >= maxArgs {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		names := listNames(cmd.Context(), kube, syncsResource, kube.namespace())
		return matching(names, toComplete, args), cobra.ShellCompDirectiveNoFileComp
	}
}

// completeGetArgs completes `converge get`: the resource type first, then Sync names.
func completeGetArgs(kube *kubeFlags) cobra.CompletionFunc {
	names := completeSyncNames(kube, 0)
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		switch {
		case len(args) == 0:
			return matching([]string{"syncs"}, toComplete, nil), cobra.ShellCompDirectiveNoFileComp
		case !slices.Contains(syncTypes, strings.ToLower(args[0])):
			return nil, cobra.ShellCompDirectiveNoFileComp // a type converge get does not list
		}
		return names(cmd, args[1:], toComplete)
	}
}

// registerFlagCompletions completes -n with the cluster's namespaces and --context with the
// kubeconfig's contexts (read from the file: no request).
func registerFlagCompletions(root *cobra.Command, kube *kubeFlags) {
	_ = root.RegisterFlagCompletionFunc("namespace", func(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		names := listNames(cmd.Context(), kube, schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "")
		return matching(names, toComplete, nil), cobra.ShellCompDirectiveNoFileComp
	})
	_ = root.RegisterFlagCompletionFunc("context", func(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		cfg, err := kube.ToRawKubeConfigLoader().RawConfig()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for name := range cfg.Contexts {
			names = append(names, name)
		}
		return matching(names, toComplete, nil), cobra.ShellCompDirectiveNoFileComp
	})
}

// listNames lists the names of the objects of gvr in ns; nil on any error (a completion
// has nowhere to report one).
func listNames(ctx context.Context, kube *kubeFlags, gvr schema.GroupVersionResource, ns string) []string {
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	api, err := newSyncAPI(kube, completionTimeout)
	if err != nil {
		return nil
	}
	list, err := api.dc.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	names := make([]string, 0, len(list.Items))
	for _, o := range list.Items {
		names = append(names, o.GetName())
	}
	return names
}

// matching returns the names that start with prefix and are not in given, sorted.
func matching(names []string, prefix string, given []string) []cobra.Completion {
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, prefix) && !slices.Contains(given, n) {
			out = append(out, n)
		}
	}
	sort.Strings(out)
	return out
}
