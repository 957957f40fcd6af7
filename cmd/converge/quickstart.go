package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// quickStart creates and owns one Sync from `converge run` flags.
type quickStart struct {
	gitURL, branch, tag, semver, commit, path, name string
	interval                                        time.Duration
	prune                                           bool
}

func (q *quickStart) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&q.gitURL, "git-url", "", "quick start: create and own a Sync for this repository")
	f.StringVar(&q.branch, "ref", "", "quick start: branch to follow (default main)")
	f.StringVar(&q.tag, "tag", "", "quick start: tag to apply")
	f.StringVar(&q.semver, "semver", "", "quick start: semver range over tags, e.g. '>=1.0.0 <2.0.0'")
	f.StringVar(&q.commit, "commit", "", "quick start: exact commit SHA")
	f.StringVar(&q.path, "path", ".", "quick start: folder in the repository")
	f.StringVar(&q.name, "name", "quickstart", "quick start: name of the Sync (in -n NAMESPACE)")
	f.DurationVar(&q.interval, "interval", 5*time.Minute, "quick start: resync interval")
	f.BoolVar(&q.prune, "prune", true, "quick start: delete objects that left the repository")
}

// apply server-side applies the quick-start Sync in namespace, if --git-url was given.
func (q *quickStart) apply(ctx context.Context, c client.Client, namespace string) error {
	if q.gitURL == "" {
		return nil
	}
	if err := ensureNamespace(ctx, c, namespace); err != nil {
		return err
	}
	s := &v1alpha1.Sync{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Sync"},
		ObjectMeta: metav1.ObjectMeta{Name: q.name, Namespace: namespace},
		Spec: v1alpha1.SyncSpec{
			Source:   v1alpha1.Source{Git: &v1alpha1.GitSource{URL: q.gitURL, Ref: v1alpha1.GitRef{Branch: q.branch, Tag: q.tag, SemVer: q.semver, Commit: q.commit}}},
			Path:     q.path,
			Interval: metav1.Duration{Duration: q.interval},
			Prune:    q.prune,
			Wait:     true,
		},
	}
	if err := c.Patch(ctx, s, client.Apply, client.FieldOwner("converge-quickstart"), client.ForceOwnership); err != nil {
		return fmt.Errorf("quick start Sync %s/%s: %w", namespace, q.name, err)
	}
	return nil
}
