package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Hand-written deep copies: the types are small and change rarely.

// DeepCopyInto copies s into out.
func (s *Sync) DeepCopyInto(out *Sync) {
	*out = *s
	out.TypeMeta = s.TypeMeta
	s.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	s.Spec.DeepCopyInto(&out.Spec)
	s.Status.DeepCopyInto(&out.Status)
}

// DeepCopy returns a deep copy of s.
func (s *Sync) DeepCopy() *Sync {
	if s == nil {
		return nil
	}
	out := new(Sync)
	s.DeepCopyInto(out)
	return out
}

// DeepCopyObject implements runtime.Object.
func (s *Sync) DeepCopyObject() runtime.Object { return s.DeepCopy() }

// DeepCopyObject implements runtime.Object.
func (l *SyncList) DeepCopyObject() runtime.Object {
	if l == nil {
		return nil
	}
	out := &SyncList{TypeMeta: l.TypeMeta}
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Sync, len(l.Items))
		for i := range l.Items {
			l.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// DeepCopyInto copies s into out.
func (s *SyncSpec) DeepCopyInto(out *SyncSpec) {
	*out = *s
	if s.Source.Git != nil {
		g := *s.Source.Git
		if g.SecretRef != nil {
			r := *g.SecretRef
			g.SecretRef = &r
		}
		out.Source.Git = &g
	}
	out.RetryInterval = copyDuration(s.RetryInterval)
	out.Timeout = copyDuration(s.Timeout)
	if s.Webhook != nil {
		w := *s.Webhook
		out.Webhook = &w
	}
}

// DeepCopyInto copies s into out.
func (s *SyncStatus) DeepCopyInto(out *SyncStatus) {
	*out = *s
	if s.Conditions != nil {
		out.Conditions = make([]metav1.Condition, len(s.Conditions))
		for i := range s.Conditions {
			s.Conditions[i].DeepCopyInto(&out.Conditions[i])
		}
	}
	if s.Inventory != nil {
		v := *s.Inventory
		v.Objects = append([]InventoryObject(nil), s.Inventory.Objects...)
		out.Inventory = &v
	}
	if s.Summary != nil {
		v := *s.Summary
		out.Summary = &v
	}
}

func copyDuration(d *metav1.Duration) *metav1.Duration {
	if d == nil {
		return nil
	}
	v := *d
	return &v
}
