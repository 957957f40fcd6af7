package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupVersion is the API group and version of Sync.
var GroupVersion = schema.GroupVersion{Group: "converge.dev", Version: "v1alpha1"}

// AddToScheme registers Sync and SyncList with a scheme.
func AddToScheme(s *runtime.Scheme) error {
	s.AddKnownTypes(GroupVersion, &Sync{}, &SyncList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return nil
}

// Condition types and the annotation a user sets to ask for a reconcile now.
const (
	ConditionReady       = "Ready"
	ConditionReconciling = "Reconciling"
	ConditionStalled     = "Stalled"

	// RequestedAtAnnotation asks for an immediate reconcile; its value is mirrored to
	// status.lastHandledRequest once handled.
	RequestedAtAnnotation = "converge.dev/requestedAt"
	// Finalizer guards the deletion policy of a Sync.
	Finalizer = "converge.dev/finalizer"
)

// Deletion policies of a Sync.
const (
	DeletionPolicyDelete = "Delete"
	DeletionPolicyOrphan = "Orphan"
)

// Sync keeps the objects rendered from a git path applied to the cluster.
type Sync struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   SyncSpec   `json:"spec"`
	Status SyncStatus `json:"status,omitempty"`
}

// SyncList is a list of Syncs.
type SyncList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Sync `json:"items"`
}

// SyncSpec is what a user declares.
type SyncSpec struct {
	Source Source `json:"source"`
	// Path inside the source: a folder with kustomization.yaml is built with kustomize,
	// any other folder is read as plain YAML.
	Path string `json:"path,omitempty"`
	// Interval between reconciles (resync and drift correction), with jitter.
	Interval metav1.Duration `json:"interval"`
	// RetryInterval is the first back-off after a failure (doubling, capped at Interval).
	RetryInterval *metav1.Duration `json:"retryInterval,omitempty"`
	// Timeout bounds the readiness wait.
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Prune deletes objects that left the source.
	Prune bool `json:"prune"`
	// Wait waits for applied objects to become Current before Ready=True.
	Wait bool `json:"wait"`
	// TargetNamespace sets the namespace of every namespaced object.
	TargetNamespace string `json:"targetNamespace,omitempty"`
	// ServiceAccountName is impersonated for apply and prune.
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// Suspend stops reconciles until unset.
	Suspend bool `json:"suspend,omitempty"`
	// DeletionPolicy is Delete (prune the inventory when the Sync is deleted) or Orphan.
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
	// PruneBudget refuses a prune of more objects than this; 0 means unlimited.
	PruneBudget int `json:"pruneBudget,omitempty"`
	// AllowEmpty allows an empty render to prune everything.
	AllowEmpty bool `json:"allowEmpty,omitempty"`
	// Force recreates objects whose immutable fields changed (only objects this Sync's
	// inventory owns).
	Force bool `json:"force,omitempty"`
	// Adopt takes over objects without an owner annotation that another tool (Helm, kubectl
	// apply) manages; without it they fail with a message naming the tool, untouched.
	Adopt bool `json:"adopt,omitempty"`
	// Webhook lets a push notification on /hooks/<namespace>/<name> ask for a reconcile now.
	// Without it the webhook never triggers this Sync.
	Webhook *Webhook `json:"webhook,omitempty"`
}

// Webhook names the Secret that signs this Sync's push notifications, as a Flux Receiver
// does: its key "token" is the HMAC secret of GitHub's X-Hub-Signature-256 and the value of
// GitLab's X-Gitlab-Token. Each Sync has its own, so one tenant's secret never triggers
// another tenant's Sync.
type Webhook struct {
	// SecretRef names a Secret in the Sync's namespace with the key "token".
	SecretRef LocalObjectReference `json:"secretRef"`
}

// Source says where the manifests come from.
type Source struct {
	Git *GitSource `json:"git,omitempty"`
}

// GitSource is a git repository and ref.
type GitSource struct {
	URL string `json:"url"`
	Ref GitRef `json:"ref,omitempty"`
	// SecretRef names a Secret in the Sync's namespace with username/password, bearerToken,
	// or identity (SSH private key) and known_hosts.
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// GitRef selects a commit: exactly one of Branch, Tag, SemVer or Commit (Branch defaults to main).
type GitRef struct {
	Branch string `json:"branch,omitempty"`
	Tag    string `json:"tag,omitempty"`
	SemVer string `json:"semver,omitempty"`
	Commit string `json:"commit,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	Name string `json:"name"`
}

// SyncStatus is what the status writer records.
type SyncStatus struct {
	// ObservedGeneration is the generation the conditions describe; it is never lowered.
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
	// LastAppliedRevision is the last revision applied successfully.
	LastAppliedRevision string `json:"lastAppliedRevision,omitempty"`
	// LastAttemptedRevision is the revision of the last reconcile, successful or not.
	LastAttemptedRevision string `json:"lastAttemptedRevision,omitempty"`
	// LastHandledRequest mirrors the converge.dev/requestedAt annotation once handled.
	LastHandledRequest string           `json:"lastHandledRequest,omitempty"`
	Inventory          *InventoryStatus `json:"inventory,omitempty"`
	Summary            *Summary         `json:"summary,omitempty"`
}

// InventoryStatus names the inventory ConfigMap and its size.
type InventoryStatus struct {
	Name    string `json:"name"`
	Entries int    `json:"entries"`
	// Objects is a recovery copy of the inventory as recorded after the last apply (capped,
	// objects outside the Sync's namespace first). It is written after the apply, so it is
	// a hint to find what we own when the ConfigMap was lost, never the write-ahead record.
	Objects []InventoryObject `json:"objects,omitempty"`
}

// InventoryObject is one entry of the recovery copy: the object's ns_name_group_kind (as
// in the ConfigMap) and the UID recorded for it.
type InventoryObject struct {
	ID  string `json:"id"`
	UID string `json:"uid,omitempty"`
}

// Summary counts the actions of the last apply that changed something (created, configured,
// pruned or failed an object), or of the first apply of the last attempted revision: a
// reconcile that changed nothing leaves it as it was, so it never reads "pruned: 0" a moment
// after a prune, and a daemon restart does not rewrite "created" as "unchanged". NotReady is
// the exception: it counts the objects not ready at the latest reconcile.
type Summary struct {
	Created    int `json:"created"`
	Configured int `json:"configured"`
	Unchanged  int `json:"unchanged"`
	Pruned     int `json:"pruned"`
	Skipped    int `json:"skipped,omitempty"`
	Failed     int `json:"failed"`
	NotReady   int `json:"notReady"`
}
