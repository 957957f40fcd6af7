package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/cli-utils/pkg/object"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/converge-dev/converge/cmd/converge/daemon"
	"github.com/converge-dev/converge/engine"
	"github.com/converge-dev/converge/inventory"
	"github.com/converge-dev/converge/status/v1alpha1"
)

const traceLong = `Trace says where an object in the cluster comes from, as flux trace does: the owner its
annotation config.k8s.io/owning-inventory names and, for a Sync, the Sync, whether its inventory
records the object, its source (URL, ref, path), the revision it last applied, the file of the
source the object was rendered from, and the object's field managers (managedFields: who last
applied or updated which fields, and when), which name who changed an object besides Converge.

KIND is a kind or resource as kubectl takes it (Deployment, deployment, deployments.apps, cm);
a namespaced object is looked up in -n's namespace.

FILE is found by rendering the Sync's source at its last applied revision, as converge tree
does (a file:// or loopback URL only with --allow-local-git); --files=false skips that fetch. -o json and -o yaml print the trace as an object.

An object no inventory owns is an error with exit code 1 that says so, as is an object that
does not exist; other errors exit 2.`

// traceResult is what `converge trace` prints.
type traceResult struct {
	Object      traceObject `json:"object"`
	Health      string      `json:"health"`
	Owner       string      `json:"owner"`
	InventoryID string      `json:"inventoryID"`
	// Sync, Source, Revision, Inventoried and File are set for an object of a Sync.
	Sync          *traceSync     `json:"sync,omitempty"`
	Inventoried   *bool          `json:"inventoried,omitempty"`
	Source        *traceSource   `json:"source,omitempty"`
	Revision      string         `json:"revision,omitempty"`
	File          string         `json:"file,omitempty"`
	FieldManagers []fieldManager `json:"fieldManagers"`
}

type traceObject struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Namespace  string `json:"namespace,omitempty"`
	Name       string `json:"name"`
	UID        string `json:"uid"`
}

type traceSync struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Ready     string `json:"ready"`
	Suspended bool   `json:"suspended"`
}

type traceSource struct {
	URL  string `json:"url"`
	Ref  string `json:"ref,omitempty"`
	Path string `json:"path,omitempty"`
}

// fieldManager is one entry of the object's managedFields.
type fieldManager struct {
	Manager     string       `json:"manager"`
	Operation   string       `json:"operation"`
	Subresource string       `json:"subresource,omitempty"`
	Time        *metav1.Time `json:"time,omitempty"`
	Fields      []string     `json:"fields,omitempty"`
}

// traceOptions are the flags of `converge trace`.
type traceOptions struct {
	kube       *kubeFlags
	allowLocal bool
	output     string
	files      bool
}

func newTraceCommand(kube *kubeFlags) *cobra.Command {
	o := &traceOptions{kube: kube}
	cmd := &cobra.Command{
		Use:   "trace KIND/NAME",
		Short: "Say which Sync owns an object, from which source, revision and file, and who else changed it",
		Long:  traceLong,
		Example: `  converge trace -n apps deployment/web
  converge trace -n apps configmap/settings -o json | jq -r '.fieldManagers[].manager'`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return o.run(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args[0])
		},
	}
	addRowOutputFlag(cmd, &o.output)
	cmd.Flags().BoolVar(&o.files, "files", true, "render the owning Sync's source to show the object's FILE (a git fetch)")
	addAllowLocalGitFlag(cmd, &o.allowLocal)
	return cmd
}

func (o *traceOptions) run(ctx context.Context, out, errOut io.Writer, arg string) error {
	if err := checkRowFormat(o.output); err != nil {
		return err
	}
	kind, name, ok := strings.Cut(arg, "/")
	if !ok || kind == "" || name == "" || strings.Contains(name, "/") {
		return fmt.Errorf("%q: give the object as KIND/NAME, for example deployment/web (-n for its namespace)", arg)
	}
	c, eng, err := o.kube.clientAndEngine()
	if err != nil {
		return err
	}
	u, err := o.object(ctx, kind, name)
	if err != nil {
		return err
	}
	t := &traceResult{Object: traceObject{APIVersion: u.GetAPIVersion(), Kind: u.GetKind(), Namespace: u.GetNamespace(),
		Name: u.GetName(), UID: string(u.GetUID())}, FieldManagers: fieldManagers(u)}
	id := object.UnstructuredToObjMetadata(u)
	t.Health, _ = healthOf(u)
	t.InventoryID = u.GetAnnotations()[inventory.OwnerAnnotation]
	if t.InventoryID == "" {
		return &exitError{code: exitCodeNotFound, err: fmt.Errorf("%s %s is not managed by Converge: it has no %s annotation, "+
			"so no Sync, converge apply or converge install owns it (its field managers: %s)",
			u.GetKind(), nsName(u.GetNamespace(), u.GetName()), inventory.OwnerAnnotation, managerNames(t.FieldManagers))}
	}
	t.Owner = inventory.Describe(t.InventoryID)
	if s, err := o.owningSync(ctx, t.InventoryID); err != nil {
		return err
	} else if s != nil {
		if err := o.traceSync(ctx, errOut, c, eng, s, id, t); err != nil {
			return err
		}
	}
	if o.output != "table" {
		return writeStructured(out, t, o.output)
	}
	return printTrace(out, t)
}

// object reads the object kind/name (kind as kubectl takes it) in -n's namespace when it is
// namespaced.
func (o *traceOptions) object(ctx context.Context, kind, name string) (*unstructured.Unstructured, error) {
	mapper, err := o.kube.ToRESTMapper()
	if err != nil {
		return nil, fmt.Errorf("kubeconfig: %w", err)
	}
	gvr, gr := schema.ParseResourceArg(strings.ToLower(kind))
	var gvk schema.GroupVersionKind
	if gvr != nil {
		gvk, err = mapper.KindFor(*gvr)
	}
	if gvr == nil || err != nil {
		gvk, err = mapper.KindFor(gr.WithVersion(""))
	}
	if err != nil {
		return nil, explain(fmt.Errorf("kind %q: %w (kubectl api-resources lists the kinds the cluster serves)", kind, err), nil)
	}
	mapping, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, explain(fmt.Errorf("kind %q: %w", kind, err), nil)
	}
	api, err := newSyncAPI(o.kube, 0)
	if err != nil {
		return nil, err
	}
	ns := ""
	if mapping.Scope.Name() == meta.RESTScopeNameNamespace {
		ns = o.kube.namespace()
	}
	u, err := api.dc.Resource(mapping.Resource).Namespace(ns).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, &exitError{code: exitCodeNotFound, err: fmt.Errorf("%s %s not found %s", gvk.Kind, name, where(ns))}
	}
	if err != nil {
		return nil, explain(fmt.Errorf("get %s %s: %w", gvk.Kind, nsName(ns, name), err), nil)
	}
	return u, nil
}

// owningSync is the Sync whose inventory ID is id; nil for another owner (converge apply,
// converge install, an ID of another tool). A Sync that no longer exists is an error.
func (o *traceOptions) owningSync(ctx context.Context, id string) (*v1alpha1.Sync, error) {
	owner, rest, ok := strings.Cut(id, "_")
	if !ok || inventory.Owner(owner) != inventory.OwnerSync {
		return nil, nil
	}
	api, err := newSyncAPI(o.kube, 0)
	if err != nil {
		return nil, err
	}
	if ns, name, ok := strings.Cut(rest, "_"); ok && ns != "" && name != "" {
		s, err := getSync(ctx, api, ns, name)
		var ee *exitError
		if errors.As(err, &ee) && ee.code == exitCodeNotFound {
			return nil, &exitError{code: exitCodeNotFound, err: fmt.Errorf("the object's owner, Sync %s/%s, does not exist "+
				"(deleted with spec.deletionPolicy Orphan?): nothing reconciles the object", ns, name)}
		}
		return s, err
	}
	// A hashed ID (a long namespace and name): find the Sync it is the ID of.
	list, err := api.syncs.List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, explainSyncs(err, "list syncs in every namespace")
	}
	for _, item := range list.Items {
		if inventory.ID(inventory.OwnerSync, item.GetNamespace(), item.GetName()) == id {
			syncs, err := typedSyncs([]unstructured.Unstructured{item})
			if err != nil {
				return nil, err
			}
			return &syncs[0], nil
		}
	}
	return nil, &exitError{code: exitCodeNotFound, err: fmt.Errorf("no Sync has the inventory %s the object names: its owner was deleted", id)}
}

// traceSync fills t with what the Sync s says about the object id.
func (o *traceOptions) traceSync(ctx context.Context, errOut io.Writer, c client.Client, eng *engine.Engine, s *v1alpha1.Sync, id object.ObjMetadata, t *traceResult) error {
	t.Sync = &traceSync{Namespace: s.Namespace, Name: s.Name, Suspended: s.Spec.Suspend,
		Ready: readyOf(*s, func(c *metav1.Condition) string { return string(c.Status) }, "Unknown")}
	t.Revision = s.Status.LastAppliedRevision
	if g := s.Spec.Source.Git; g != nil {
		t.Source = &traceSource{URL: g.URL, Ref: gitRefString(g.Ref), Path: s.Spec.Path}
	} else if oci := s.Spec.Source.OCI; oci != nil {
		t.Source = &traceSource{URL: oci.URL, Path: s.Spec.Path}
	} else if hr := s.Spec.Source.HelmRepository; hr != nil {
		t.Source = &traceSource{URL: hr.URL}
	}
	inv, err := eng.Inventory(ctx, daemon.InventoryRef(s))
	if err != nil {
		return explain(fmt.Errorf("sync %s/%s: read its inventory: %w", s.Namespace, s.Name, err), nil)
	}
	recorded := inv.Has(id)
	t.Inventoried = &recorded
	if o.files {
		if b, err := loadSyncSource(ctx, c, s, o.allowLocal, false); err != nil {
			fmt.Fprintf(errOut, "warning: file left out: %v\n", err)
		} else {
			t.File = originsByID(c, s, b)[id]
		}
	}
	return nil
}
