package daemon

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// QuickStart is one Sync that `converge run --git-url` creates and owns: a quick start with
// no CRD authoring. It is applied at start when GitURL is set.
type QuickStart struct {
	// GitURL is the repository; empty means no quick start.
	GitURL string
	// Ref selects the revision: it is the Sync's spec.source.git.ref as given.
	Ref v1alpha1.GitRef
	// Path is the folder in the repository.
	Path string
	// Name and Namespace name the Sync.
	Name, Namespace string
	// Interval is the Sync's resync interval.
	Interval time.Duration
	// Prune deletes objects that left the repository.
	Prune bool
}

// DefaultQuickStart holds the defaults of the quick-start flags (no GitURL: off).
func DefaultQuickStart() QuickStart {
	return QuickStart{Path: ".", Name: "quickstart", Namespace: "default", Interval: 5 * time.Minute, Prune: true}
}

// apply server-side applies the quick-start Sync, if GitURL is set.
func (q QuickStart) apply(ctx context.Context, c client.Client) error {
	if q.GitURL == "" {
		return nil
	}
	if err := ensureNamespace(ctx, c, q.Namespace); err != nil {
		return err
	}
	s := &v1alpha1.Sync{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "Sync"},
		ObjectMeta: metav1.ObjectMeta{Name: q.Name, Namespace: q.Namespace},
		Spec: v1alpha1.SyncSpec{
			Source:   v1alpha1.Source{Git: &v1alpha1.GitSource{URL: q.GitURL, Ref: q.Ref}},
			Path:     q.Path,
			Interval: metav1.Duration{Duration: q.Interval},
			Prune:    q.Prune,
			Wait:     true,
		},
	}
	if err := c.Patch(ctx, s, client.Apply, client.FieldOwner("converge-quickstart"), client.ForceOwnership); err != nil {
		return fmt.Errorf("quick start Sync %s/%s: %w", q.Namespace, q.Name, err)
	}
	return nil
}
