package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
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
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:categories=converge,shortName=sy
// +kubebuilder:printcolumn:name="Ready",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].status",description="Whether the last reconcile applied the source"
// +kubebuilder:printcolumn:name="Reason",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].reason",description="The Ready condition's reason"
// +kubebuilder:printcolumn:name="Revision",type="string",JSONPath=".status.lastAppliedRevision",description="The last revision applied successfully"
// +kubebuilder:printcolumn:name="Age",type="date",JSONPath=".metadata.creationTimestamp"
// +kubebuilder:printcolumn:name="Owner",type="string",JSONPath=".status.owner",priority=1,description="The replica that wrote the status (kubectl get -o wide)"
// +kubebuilder:printcolumn:name="Pinned",type="string",JSONPath=".spec.rollback.revision",priority=1,description="The revision spec.rollback pins the Sync to (kubectl get -o wide)"
// +kubebuilder:printcolumn:name="Message",type="string",JSONPath=".status.conditions[?(@.type==\"Ready\")].message",description="The Ready condition's message"
type Sync struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// Spec is what the user declares: where the manifests come from and how to apply them.
	// +required
	Spec SyncSpec `json:"spec"`
	// Status is what the daemon observed and did; only the daemon writes it.
	// +optional
	Status SyncStatus `json:"status,omitempty"`
}

// SyncList is a list of Syncs.
//
// +kubebuilder:object:root=true
type SyncList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	// Items are the Syncs of the list.
	Items []Sync `json:"items"`
}

// SyncSpec is what a user declares.
//
// +kubebuilder:validation:XValidation:rule="!has(self.source.helm) || !(has(self.patches) || has(self.images) || has(self.namePrefix) || has(self.nameSuffix) || has(self.commonMetadata) || has(self.components))",message="patches, images, namePrefix, nameSuffix, commonMetadata and components change a kustomize build: a Helm chart takes patches and images in spec.source.helm.postRenderers"
type SyncSpec struct {
	// Source says where the manifests come from.
	// +required
	Source Source `json:"source"`
	// Path inside the source: a folder with kustomization.yaml is built with kustomize,
	// any other folder is read as plain YAML. Empty means the root.
	// +kubebuilder:default="."
	// +optional
	Path string `json:"path,omitempty"`
	// Interval between reconciles (resync and drift correction), with ±10% jitter, as a
	// duration such as 30s, 5m or 1h30m, from 2s to 8760h. It also caps the back-off after
	// failures. Each reconcile lists the source's refs, so the floor bounds what one Sync
	// costs its git host and its namespace's share of the daemon's workers; a change is
	// better announced by a webhook (spec.webhook) than by a short interval. A duration Go
	// cannot hold (over about 290 years) is refused by the schema: stored, it would fail the
	// daemon's decoding of every Sync.
	// +kubebuilder:default="5m"
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('2s') && duration(self) <= duration('8760h')",message="must be an interval from 2s to 8760h (one year)"
	// +optional
	Interval metav1.Duration `json:"interval,omitzero"`
	// RetryInterval is the first back-off after a failure, doubling on each further failure
	// and capped at Interval; unset means 30s. At least 1s: the doubling takes a failing
	// Sync past a few seconds within a few retries.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('8760h')",message="must be a retry interval from 1s to 8760h"
	// +optional
	RetryInterval *metav1.Duration `json:"retryInterval,omitempty"`
	// Timeout bounds the wait for applied objects to become ready, at most 1h (judged by
	// polls that hold no worker); unset means the engine's default.
	// +kubebuilder:validation:Type=string
	// +kubebuilder:validation:Pattern=`^([0-9]+(\.[0-9]+)?(ms|s|m|h))+$`
	// +kubebuilder:validation:MaxLength=32
	// +kubebuilder:validation:XValidation:rule="duration(self) >= duration('1s') && duration(self) <= duration('1h')",message="must be a timeout from 1s to 1h"
	// +optional
	Timeout *metav1.Duration `json:"timeout,omitempty"`
	// Prune deletes objects that left the source (only objects this Sync's inventory owns).
	// +kubebuilder:default=true
	// +optional
	Prune bool `json:"prune"`
	// Wait waits for applied objects to become Current before Ready=True.
	// +kubebuilder:default=true
	// +optional
	Wait bool `json:"wait"`
	// TargetNamespace sets the namespace of every namespaced object.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	TargetNamespace string `json:"targetNamespace,omitempty"`
	// ServiceAccountName, a service account in the Sync's namespace, is impersonated for
	// everything the Sync does (apply, prune, readiness and health reads, deletion); unset
	// means the daemon's --default-service-account, or the daemon's own identity when that
	// flag is not set (single-tenant). It is a DNS-1123 subdomain, as every ServiceAccount
	// name is: anything else could never be impersonated and would only fail later ("" is
	// accepted and means unset).
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$`
	// +optional
	ServiceAccountName string `json:"serviceAccountName,omitempty"`
	// Suspend stops reconciles until unset.
	// +kubebuilder:default=false
	// +optional
	Suspend bool `json:"suspend,omitempty"`
	// Rollback pins the Sync to an earlier revision of its source while reconciles, drift
	// correction and pruning go on; `converge rollback` sets it, `converge resume` lifts it.
	// +optional
	Rollback *Rollback `json:"rollback,omitempty"`
	// AutoRollback applies the last revision that was Ready again when a new revision fails
	// its health checks within spec.timeout, until the source has another new revision
	// (status.rolledBack says so). Never across the removal of a CRD.
	// +optional
	AutoRollback bool `json:"autoRollback,omitempty"`
	// DeletionPolicy is Delete (prune the inventory when the Sync is deleted) or Orphan
	// (leave the objects in the cluster).
	// +kubebuilder:validation:Enum=Delete;Orphan
	// +kubebuilder:default=Delete
	// +optional
	DeletionPolicy string `json:"deletionPolicy,omitempty"`
	// PruneBudget refuses a prune of more objects than this; 0 means unlimited.
	// +kubebuilder:validation:Minimum=0
	// +optional
	PruneBudget int `json:"pruneBudget,omitempty"`
	// AllowEmpty allows an empty render to prune everything.
	// +optional
	AllowEmpty bool `json:"allowEmpty,omitempty"`
	// Force recreates objects whose immutable fields changed (only objects this Sync's
	// inventory owns).
	// +optional
	Force bool `json:"force,omitempty"`
	// Adopt takes over objects without an owner annotation that another tool (Helm, kubectl
	// apply) manages; without it they fail with a message naming the tool, untouched.
	// +optional
	Adopt bool `json:"adopt,omitempty"`
	// TakeOverManagers are the field managers whose fields this Sync takes over when it
	// applies an object it owns or adopts: their managedFields entries become Converge's, so
	// a field later removed from the source is removed from the cluster (a name, or a prefix
	// ending in "*"). Managers not listed (an autoscaler, a mutating webhook) keep their
	// fields. Unset: Flux's (kustomize-controller, helm-controller), Argo CD's
	// (argocd-controller, argocd-application-controller) and kubectl's (kubectl, kubectl-*,
	// before-first-apply). An empty list: none. The old tools' tracking labels and
	// annotations are removed either way, unless the source declares them.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +optional
	TakeOverManagers *[]string `json:"takeOverManagers,omitempty"` // a pointer: an empty list (none) differs from unset

	// Webhook lets a push notification on /hooks/<namespace>/<name> ask for a reconcile now,
	// signed with this Sync's own Secret. Without it the webhook never triggers this Sync.
	// +optional
	Webhook *Webhook `json:"webhook,omitempty"`
	// HealthChecks are more objects to wait for before Ready=True, of any kind, whether the
	// source declares them or not; they are only read, never applied or pruned. As Flux's
	// Kustomization spec.healthChecks. Each is read at every readiness poll: from the
	// daemon's watch cache when it holds the kind already, else from the API server.
	// +kubebuilder:validation:MaxItems=256
	// +optional
	HealthChecks []HealthCheck `json:"healthChecks,omitempty"`
	// HealthCheckExprs judge the readiness of the objects of a kind with CEL expressions
	// instead of kstatus, for custom resources without a Ready condition. As Flux's
	// Kustomization spec.healthCheckExprs: the same fields and expressions.
	// +optional
	HealthCheckExprs []HealthCheckExpr `json:"healthCheckExprs,omitempty"`
	// DependsOn lists Syncs that must be Ready for their current generation before this one
	// is applied (reason DependencyNotReady until then); a Sync being deleted waits for the
	// Syncs that depend on it. As Flux's Kustomization spec.dependsOn.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	DependsOn []DependencyReference `json:"dependsOn,omitempty"`
	// PostBuild substitutes variables in the rendered objects before they are applied. As
	// Flux's Kustomization spec.postBuild.
	// +optional
	PostBuild *PostBuild `json:"postBuild,omitempty"`
	// Decryption decrypts SOPS-encrypted Secrets of the source in memory before they are
	// applied. As Flux's Kustomization spec.decryption.
	// +optional
	Decryption *Decryption `json:"decryption,omitempty"`
	// Notifications send this Sync's transitions (became Ready, failed, drifted, rolled
	// back) to chat webhooks and commit statuses, never on every reconcile.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	Notifications []Notification `json:"notifications,omitempty"`
	// Ignore lists fields to leave alone (an autoscaler's spec.replicas, a webhook's
	// injections), by path or by the field managers that own them, as Flux's Kustomization
	// spec.ignore and Argo CD's ignoreDifferences.
	// +kubebuilder:validation:MaxItems=64
	// +optional
	Ignore []IgnoreRule `json:"ignore,omitempty"`
	// DriftPolicy says what a reconcile of the applied revision does with objects changed
	// or deleted out of band: Correct applies them again (the default), Report leaves them
	// and reports them (status.drift, the Drifted condition, an event and a metric). A new
	// revision, or a change of this spec, applies every object either way; so moving from
	// Report to Correct corrects at once.
	// +optional
	DriftPolicy DriftPolicy `json:"driftPolicy,omitempty"`
	// DriftPolicyKinds override DriftPolicy for the objects of some kinds.
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:XValidation:rule="self.all(a, self.exists_one(b, (has(a.group) ? a.group : '') == (has(b.group) ? b.group : '') && a.kind == b.kind))",message="a kind may be listed once"
	// +listType=atomic
	// +optional
	DriftPolicyKinds []KindDriftPolicy `json:"driftPolicyKinds,omitempty"`
	// BuildFields are Flux Kustomization's patches, images, namePrefix, nameSuffix,
	// commonMetadata and components, for git and OCI sources.
	BuildFields `json:",inline"`
}

// DependencyReference names a Sync this one depends on.
type DependencyReference struct {
	// Name of the Sync.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Namespace of the Sync; empty means this Sync's namespace.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// PostBuild is the variable substitution run on the rendered objects, as Flux's: ${var},
// ${var:=default} and ${var:-default} are replaced in every object but those annotated
// kustomize.toolkit.fluxcd.io/substitute: disabled or converge.dev/substitute: disabled.
type PostBuild struct {
	// Substitute holds variables and their values; it wins over SubstituteFrom. Names are
	// letters, digits and underscores, not starting with a digit.
	// +kubebuilder:validation:MaxProperties=1024
	// +kubebuilder:validation:XValidation:rule="self.all(k, k.matches('^[_a-zA-Z][_a-zA-Z0-9]*$'))",message="variable names are letters, digits and _, not starting with a digit"
	// +optional
	Substitute map[string]string `json:"substitute,omitempty"`
	// SubstituteFrom reads variables from ConfigMaps and Secrets in the Sync's namespace (as
	// the Sync's identity), each key a variable; a later entry wins over an earlier one.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	SubstituteFrom []SubstituteReference `json:"substituteFrom,omitempty"`
	// Strict makes a variable without a value and without a default an error naming the
	// object and the variable (nothing is applied); otherwise it is replaced by "".
	// +optional
	Strict bool `json:"strict,omitempty"`
}

// SubstituteReference names a ConfigMap or Secret whose keys are substitution variables.
type SubstituteReference struct {
	// Kind is ConfigMap or Secret.
	// +kubebuilder:validation:Enum=ConfigMap;Secret
	// +required
	Kind string `json:"kind"`
	// Name of the ConfigMap or Secret, in the Sync's namespace.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +required
	Name string `json:"name"`
	// Optional lets the reconcile go on when the object does not exist (a missing required
	// one fails the reconcile, nothing applied).
	// +optional
	Optional bool `json:"optional,omitempty"`
}

// Decryption says how to decrypt the source's encrypted Secrets.
type Decryption struct {
	// Provider is the decryption format; only sops.
	// +kubebuilder:validation:Enum=sops
	// +required
	Provider string `json:"provider"`
	// SecretRef names a Secret in the Sync's namespace holding the private keys (for age,
	// keys ending in .agekey), read as the Sync's identity.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
}

// HealthCheck names an object to wait for, as Flux's NamespacedObjectKindReference.
type HealthCheck struct {
	// APIVersion of the object, such as apps/v1; its group selects the kind. Empty means the
	// core group.
	// +optional
	APIVersion string `json:"apiVersion,omitempty"`
	// Kind of the object.
	// +kubebuilder:validation:MinLength=1
	// +required
	Kind string `json:"kind"`
	// Name of the object.
	// +kubebuilder:validation:MinLength=1
	// +required
	Name string `json:"name"`
	// Namespace of the object; empty means the Sync's namespace (ignored for cluster-scoped
	// kinds).
	// +optional
	Namespace string `json:"namespace,omitempty"`
}

// HealthCheckExpr is the readiness of one kind as CEL expressions over the object, whose
// top-level fields (apiVersion, kind, metadata, spec, status) are the variables. An object
// whose status.observedGeneration differs from its metadata.generation is in progress;
// otherwise the expressions are tried in the order inProgress, failed, current and the first
// true one decides; none true is in progress. As Flux's CustomHealthCheck.
type HealthCheckExpr struct {
	// APIVersion of the kind the expressions judge, such as example.com/v1.
	// +kubebuilder:validation:MinLength=1
	// +required
	APIVersion string `json:"apiVersion"`
	// Kind the expressions judge.
	// +kubebuilder:validation:MinLength=1
	// +required
	Kind string `json:"kind"`
	// Current is true when the object reached its desired state.
	// +kubebuilder:validation:MinLength=1
	// +required
	Current string `json:"current"`
	// InProgress is true while the object is still on its way.
	// +optional
	InProgress string `json:"inProgress,omitempty"`
	// Failed is true when the object will not reach its desired state: the wait ends at
	// once, Ready=False.
	// +optional
	Failed string `json:"failed,omitempty"`
}

// Webhook names the Secret that signs this Sync's push notifications, as a Flux Receiver
// does: its key "token" is the HMAC secret of GitHub's X-Hub-Signature-256 and the value of
// GitLab's X-Gitlab-Token. Each Sync has its own, so one tenant's secret never triggers
// another tenant's Sync.
type Webhook struct {
	// SecretRef names a Secret in the Sync's namespace whose key "token" is the GitHub HMAC
	// secret or the GitLab token.
	// +kubebuilder:validation:XValidation:rule="size(self.name) > 0",message="must name a Secret",fieldPath=".name"
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// Source says where the manifests come from: exactly one of Git, OCI and HelmRepository,
// rendered as a Helm chart when Helm is set (always for HelmRepository).
//
// +kubebuilder:validation:XValidation:rule="[has(self.git), has(self.oci), has(self.helmRepository)].filter(x, x).size() == 1",message="set exactly one of git, oci and helmRepository"
// +kubebuilder:validation:XValidation:rule="!has(self.helmRepository) || (has(self.helm) && has(self.helm.chart) && size(self.helm.chart) > 0)",message="helmRepository needs helm.chart, the chart's name in the repository"
type Source struct {
	// Git is a git repository and the ref to follow.
	// +optional
	Git *GitSource `json:"git,omitempty"`
	// Helm renders spec.path (or Helm.Chart) of the source as a Helm chart, template-only.
	// +optional
	Helm *HelmSource `json:"helm,omitempty"`
	// OCI is an artifact in an OCI registry, in Flux's format (`flux push artifact`).
	// +optional
	OCI *OCISource `json:"oci,omitempty"`
	// HelmRepository is a Helm chart repository, an HTTP one (index.yaml) or an OCI
	// registry (oci://): Helm.Chart names the chart in it, Helm.Version its version.
	// +optional
	HelmRepository *HelmRepositorySource `json:"helmRepository,omitempty"`
}

// HelmRepositorySource is a Helm chart repository, as Flux's HelmRepository or Argo CD's
// Helm repoURL names one.
type HelmRepositorySource struct {
	// URL of the repository: https://host/path (an HTTP repository serving index.yaml;
	// http:// too) or oci://host[:port]/path (charts pushed with helm push, each at
	// oci://host/path/<chart>).
	// +kubebuilder:validation:Pattern=`^(https?|oci)://[^@?#]+$`
	// +kubebuilder:validation:MaxLength=2048
	// +required
	URL string `json:"url"`
	// SecretRef names a Secret in the Sync's namespace, read as the Sync's identity: with
	// username and password (HTTP basic auth; for an OCI registry too), or of type
	// kubernetes.io/dockerconfigjson for an OCI registry.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// CertSecretRef names a Secret in the Sync's namespace whose ca.crt is a PEM bundle
	// trusted for the repository's certificate, besides the system roots.
	// +optional
	CertSecretRef *LocalObjectReference `json:"certSecretRef,omitempty"`
	// PassCredentials sends the credentials to a chart URL of the index on another host
	// than the repository's too (helm --pass-credentials); without it they go to the
	// repository's scheme, host and port only.
	// +optional
	PassCredentials bool `json:"passCredentials,omitempty"`
	// Insecure speaks plain HTTP to an OCI registry.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
	// Verify checks the cosign signature of a chart in an OCI registry before it is
	// rendered, as spec.source.oci.verify.
	// +optional
	Verify *OCIVerification `json:"verify,omitempty"`
}

// HelmSource renders a chart folder of the source the way `helm template` does, in the
// daemon's isolated render child: Helm never runs, no release is stored, templates reach
// no network and `lookup` returns nothing. Install and upgrade hooks are applied as the
// chart's other objects; test, delete and rollback hooks are dropped.
type HelmSource struct {
	// Chart is the chart folder (holding Chart.yaml), or a packaged chart (.tgz), relative
	// to the source root; empty means spec.path. Its subcharts are vendored in its charts/
	// folder. With spec.source.helmRepository, the chart's name in that repository.
	// +kubebuilder:validation:MaxLength=1024
	// +optional
	Chart string `json:"chart,omitempty"`
	// Version of the chart in spec.source.helmRepository: an exact version or a semver
	// constraint (">=6.0.0 <7", "6.x"); the highest matching version wins. Empty: the
	// highest version without a prerelease, as helm's default.
	// +kubebuilder:validation:MaxLength=256
	// +optional
	Version string `json:"version,omitempty"`
	// Values are merged over the chart's values.yaml, as `helm template -f`.
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Type=object
	// +optional
	Values *apiextensionsv1.JSON `json:"values,omitempty"`
	// ReleaseName is .Release.Name; empty means the Sync's name.
	// +kubebuilder:validation:MaxLength=53
	// +kubebuilder:validation:Pattern=`^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$`
	// +optional
	ReleaseName string `json:"releaseName,omitempty"`
	// ReleaseNamespace is .Release.Namespace; empty means spec.targetNamespace, or the
	// Sync's own namespace.
	// +kubebuilder:validation:MaxLength=63
	// +optional
	ReleaseNamespace string `json:"releaseNamespace,omitempty"`
	// IncludeCRDs applies the CRDs of the chart's crds/ folders (and its subcharts'); unset
	// means true.
	// +optional
	IncludeCRDs *bool `json:"includeCRDs,omitempty"`
	// KubeVersion is .Capabilities.KubeVersion, such as v1.31.0; empty means the API
	// server's version, read once by the daemon.
	// +kubebuilder:validation:MaxLength=64
	// +optional
	KubeVersion string `json:"kubeVersion,omitempty"`
	// APIVersions are added to .Capabilities.APIVersions ("group/version" or
	// "group/version/Kind"), as `helm template --api-versions`.
	// +kubebuilder:validation:MaxItems=256
	// +kubebuilder:validation:items:MaxLength=256
	// +optional
	APIVersions []string `json:"apiVersions,omitempty"`
	// ValuesFrom reads values from ConfigMaps and Secrets of the Sync's namespace, as the
	// Sync's identity, merged in order (a later one wins) and under Values, as Flux's
	// HelmRelease valuesFrom. Values from Secrets are never shown in status or events.
	// +kubebuilder:validation:MaxItems=32
	// +optional
	ValuesFrom []ValuesReference `json:"valuesFrom,omitempty"`
	// PostRenderers change the chart's rendered objects, in order, before they are
	// decrypted and substituted, as Flux's HelmRelease postRenderers.
	// +kubebuilder:validation:MaxItems=8
	// +optional
	PostRenderers []PostRenderer `json:"postRenderers,omitempty"`
}

// OCISource is an artifact in an OCI registry, as Flux's OCIRepository names one.
type OCISource struct {
	// URL of the repository: oci://host[:port]/repository, without tag or digest.
	// +kubebuilder:validation:Pattern=`^oci://[^/@]+/[^:@]+$`
	// +required
	URL string `json:"url"`
	// Ref selects the artifact; tag latest when empty.
	// +optional
	Ref OCIRef `json:"ref,omitempty"`
	// LayerSelector picks the layer holding the manifests; the first layer when empty.
	// +optional
	LayerSelector *OCILayerSelector `json:"layerSelector,omitempty"`
	// SecretRef names a Secret of type kubernetes.io/dockerconfigjson in the Sync's
	// namespace with the registry's credentials, read as the Sync's identity.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// CertSecretRef names a Secret in the Sync's namespace whose ca.crt is a PEM bundle
	// trusted for the registry's certificate, besides the system roots.
	// +optional
	CertSecretRef *LocalObjectReference `json:"certSecretRef,omitempty"`
	// Insecure speaks plain HTTP to the registry.
	// +optional
	Insecure bool `json:"insecure,omitempty"`
	// Verify checks the artifact's cosign signature against trusted public keys before
	// anything of it is extracted or rendered, as Flux's OCIRepository spec.verify.
	// +optional
	Verify *OCIVerification `json:"verify,omitempty"`
}

// OCIVerification names the signature provider and the trusted keys.
type OCIVerification struct {
	// Provider of the signatures: cosign (classic format, tag sha256-<hex>.sig, signed
	// with a key pair). Keyless signatures are not supported.
	// +kubebuilder:validation:Enum=cosign
	// +kubebuilder:default=cosign
	// +optional
	Provider string `json:"provider,omitempty"`
	// SecretRef names a Secret in the Sync's namespace whose every value is a cosign
	// public key (PEM, as cosign generate-key-pair writes cosign.pub), read as the Sync's
	// identity.
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// OCIRef selects an artifact: at most one of Tag, SemVer or Digest; none means tag latest.
//
// +kubebuilder:validation:MaxProperties=1
type OCIRef struct {
	// Tag applies the artifact of a tag.
	// +optional
	Tag string `json:"tag,omitempty"`
	// SemVer applies the artifact of the highest tag matching a semver constraint, such as
	// ">=1.2.0 <2.0.0".
	// +optional
	SemVer string `json:"semver,omitempty"`
	// Digest applies one manifest, by its digest "sha256:<64 hex>".
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	// +optional
	Digest string `json:"digest,omitempty"`
}

// OCILayerSelector picks a layer of the artifact's manifest, as Flux's layerSelector.
type OCILayerSelector struct {
	// MediaType selects the first layer of this media type.
	// +optional
	MediaType string `json:"mediaType,omitempty"`
	// Operation is extract (unpack the tar, gzip-compressed or not; the default) or copy
	// (the layer as one file, named by its org.opencontainers.image.title annotation).
	// +kubebuilder:validation:Enum=extract;copy
	// +optional
	Operation string `json:"operation,omitempty"`
}

// GitSource is a git repository and ref.
type GitSource struct {
	// URL of the repository: https://, ssh://, git@host:path or (with converge run
	// --allow-local-git) file://.
	// +kubebuilder:validation:MinLength=1
	// +required
	URL string `json:"url"`
	// Ref selects the commit to apply; branch main when empty.
	// +optional
	Ref GitRef `json:"ref,omitempty"`
	// SecretRef names a Secret in the Sync's namespace with username/password, bearerToken,
	// or identity (SSH private key) and known_hosts.
	// +optional
	SecretRef *LocalObjectReference `json:"secretRef,omitempty"`
	// Verify checks the signature of the commit, of its annotated tag, or of both against
	// trusted public keys before anything is rendered, as Flux's GitRepository spec.verify.
	// +optional
	Verify *GitVerification `json:"verify,omitempty"`
}

// GitVerification names the trusted keys and what must be signed by one of them.
type GitVerification struct {
	// Mode: HEAD verifies the commit; Tag the annotated tag that ref.tag or ref.semver
	// resolved to; TagAndHEAD both.
	// +kubebuilder:validation:Enum=HEAD;Tag;TagAndHEAD
	// +kubebuilder:default=HEAD
	// +optional
	Mode string `json:"mode,omitempty"`
	// SecretRef names a Secret in the Sync's namespace whose every value is a public key:
	// an ASCII-armored PGP public key block, or SSH public keys in authorized_keys format
	// (for commits signed with gpg.format=ssh).
	// +required
	SecretRef LocalObjectReference `json:"secretRef"`
}

// GitRef selects a commit: at most one of Branch, Tag, SemVer or Commit; none means branch
// main.
//
// +kubebuilder:validation:MaxProperties=1
type GitRef struct {
	// Branch follows the head of a branch.
	// +optional
	Branch string `json:"branch,omitempty"`
	// Tag applies the commit of a tag.
	// +optional
	Tag string `json:"tag,omitempty"`
	// SemVer applies the highest tag matching a semver constraint, such as ">=1.2.0 <2.0.0".
	// +optional
	SemVer string `json:"semver,omitempty"`
	// Commit applies one commit, by its full 40-character SHA-1.
	// +kubebuilder:validation:Pattern=`^[0-9a-f]{40}$`
	// +optional
	Commit string `json:"commit,omitempty"`
}

// LocalObjectReference names an object in the same namespace.
type LocalObjectReference struct {
	// Name of the object.
	// +required
	Name string `json:"name"`
}

// SyncStatus is what the status writer records.
type SyncStatus struct {
	// ObservedGeneration is the generation the conditions describe; it is never lowered.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// Conditions are Ready, Reconciling and Stalled, as kstatus reads them.
	// +listType=map
	// +listMapKey=type
	// +optional
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// LastAppliedRevision is the last revision applied successfully.
	// +optional
	LastAppliedRevision string `json:"lastAppliedRevision,omitempty"`
	// LastAppliedGeneration is the metadata.generation of the spec LastAppliedRevision was
	// applied with: a reconcile of that revision and generation applies nothing new, so what
	// it would change is drift (spec.driftPolicy).
	// +optional
	LastAppliedGeneration int64 `json:"lastAppliedGeneration,omitempty"`
	// LastAttemptedRevision is the revision of the last reconcile, successful or not.
	// +optional
	LastAttemptedRevision string `json:"lastAttemptedRevision,omitempty"`
	// LastHandledRequest mirrors the converge.dev/requestedAt annotation once handled.
	// +optional
	LastHandledRequest string `json:"lastHandledRequest,omitempty"`
	// RolledBack is set while the Sync applies an earlier revision than its source's: an
	// automatic rollback away from a revision that failed, or spec.rollback.
	// +optional
	RolledBack *RolledBack `json:"rolledBack,omitempty"`
	// Inventory names the inventory ConfigMap of this Sync and keeps a recovery copy of it.
	// +optional
	Inventory *InventoryStatus `json:"inventory,omitempty"`
	// Summary counts what the last apply that changed something did.
	// +optional
	Summary *Summary `json:"summary,omitempty"`
	// Owner is the replica (its --replica-name, by default the pod name) that wrote this
	// status, in the same write as the outcome: with several replicas it says which one
	// reconciles the Sync. After a handover the new owner's first reconcile rewrites it.
	// +optional
	Owner string `json:"owner,omitempty"`
	// History holds the last distinct outcomes (generation, revision, Ready reason), newest
	// first, written in the same write as the rest of the status.
	// +kubebuilder:validation:MaxItems=10
	// +optional
	History []HistoryEntry `json:"history,omitempty"`
	// Drift lists the objects the last reconcile of the applied revision found changed or
	// deleted out of band and left so (drift policy Report), with the fields that differ and
	// the field manager that changed them. Absent when there is none.
	// +optional
	Drift *DriftStatus `json:"drift,omitempty"`
}

// InventoryStatus names the inventory ConfigMap and its size.
type InventoryStatus struct {
	// Name of the inventory ConfigMap, in the Sync's namespace.
	// +optional
	Name string `json:"name"`
	// Entries is the number of objects the inventory records.
	// +optional
	Entries int `json:"entries"`
	// Objects is a recovery copy of the inventory as recorded after the last apply (capped,
	// objects outside the Sync's namespace first). It is written after the apply, so it is
	// a hint to find what we own when the ConfigMap was lost, never the write-ahead record.
	// +optional
	Objects []InventoryObject `json:"objects,omitempty"`
	// Digest stands for Objects in a daemon's informer cache, which keeps a digest of the
	// recovery copy instead of the copy (status.CompactInventory). It is never serialised:
	// a Sync read from the API server has none.
	Digest string `json:"-"`
}

// InventoryObject is one entry of the recovery copy: the object's ns_name_group_kind (as
// in the ConfigMap) and the UID recorded for it.
type InventoryObject struct {
	// ID is the object's ns_name_group_kind.
	// +required
	ID string `json:"id"`
	// UID is the object's UID when it was recorded.
	// +optional
	UID string `json:"uid,omitempty"`
}

// Summary counts the actions of the last apply that changed something (created, configured,
// pruned or failed an object), or of the first apply of the last attempted revision: a
// reconcile that changed nothing leaves it as it was, so it never reads "pruned: 0" a moment
// after a prune, and a daemon restart does not rewrite "created" as "unchanged". NotReady is
// the exception: it counts the objects not ready at the latest reconcile.
type Summary struct {
	// Created counts objects created.
	// +optional
	Created int `json:"created"`
	// Configured counts objects changed.
	// +optional
	Configured int `json:"configured"`
	// Unchanged counts objects applied without a change.
	// +optional
	Unchanged int `json:"unchanged"`
	// Pruned counts objects deleted because they left the source.
	// +optional
	Pruned int `json:"pruned"`
	// Skipped counts objects left alone on purpose (reconcile disabled by annotation, an
	// object kept rather than pruned).
	// +optional
	Skipped int `json:"skipped,omitempty"`
	// Failed counts objects whose apply or prune failed.
	// +optional
	Failed int `json:"failed"`
	// NotReady counts objects not ready at the latest reconcile.
	// +optional
	NotReady int `json:"notReady"`
}
