package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// migrateFlags are the flags of "converge migrate flux|argocd".
type migrateFlags struct {
	allNamespaces bool
	output        string
	apply         bool
	dryRun        bool
	allowPartial  bool
	suspendSource bool
	timeout       time.Duration
}

// errPartial is the "error" of a migration that left fields untranslated: exit code 1.
var errPartial = errors.New("not translated")

func newMigrateCommand(kube *kubeFlags) *cobra.Command {
	var f migrateFlags
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Translate Flux Kustomizations or Argo CD Applications into Syncs, and hand their objects over",
		Long: `Migrate reads live Flux Kustomizations (with their GitRepository or OCIRepository) or
Argo CD Applications and prints the equivalent Syncs: same namespace, same name, with
spec.adopt so that each Sync takes over the objects the old tool applied, in place, without
deleting or recreating one.

A field no Sync field expresses (a Kustomization's kubeConfig or v1beta2
patchesStrategicMerge, an Application's kustomize settings or ignoreDifferences...) is never dropped silently: it is listed as "not
translated" on stderr (and in -o json) and the exit code is 1, unless --allow-partial.

--apply applies the Syncs server-side (field manager "converge"). Then, by default
(--suspend-source), each Sync is waited for (--timeout) until it is Ready and its inventory
lists every object of the old object's own inventory (a Kustomization's
status.inventory, an Application's status.resources); only then is the Flux Kustomization
suspended (spec.suspend: true) or the Application's automated sync turned off
(spec.syncPolicy.automated removed), so the two tools never fight over the objects and
nothing is left without a manager. When a Sync is not Ready in time or misses objects, the
old object is left running and what is missing is printed. A partial translation is not
applied unless --allow-partial: a Sync missing a Kustomization's patches would undo them.

--dry-run shows the whole plan (the Syncs, validated by a server-side dry-run, what would be
suspended, what is not translated) and changes nothing.

Exit codes: 0 everything translated (and, with --apply, handed over); 1 some fields not
translated (nothing applied without --allow-partial); 2 an error (bad input naming the
object, the API server refused, a Sync not Ready or missing objects).`,
		Example: `  # Print the Syncs replacing every Kustomization of flux-system
  converge migrate flux -n flux-system

  # The whole plan for one Kustomization, as JSON, changing nothing
  converge migrate flux -n apps podinfo --dry-run -o json

  # Hand over: apply the Syncs, wait until they adopted everything, then suspend Flux's
  converge migrate flux -A --apply --timeout 10m

  # Argo CD Applications: the same, turning off their automated sync once adopted
  converge migrate argocd -n argocd guestbook --apply`,
	}
	fl := cmd.PersistentFlags()
	fl.BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "read the objects of every namespace")
	fl.StringVarP(&f.output, "output", "o", "yaml", "output format: yaml (the Syncs; the rest on stderr) or json (the whole plan)")
	fl.BoolVar(&f.apply, "apply", false, "apply the Syncs and, with --suspend-source, suspend the old objects once adopted")
	fl.BoolVar(&f.dryRun, "dry-run", false, "show the whole plan (Syncs validated by the API server) and change nothing")
	fl.BoolVar(&f.allowPartial, "allow-partial", false, "exit 0 and allow --apply when some fields are not translated")
	fl.BoolVar(&f.suspendSource, "suspend-source", true, "with --apply, suspend the Flux Kustomization (turn off the Application's automated sync) once its Sync adopted every object")
	fl.DurationVar(&f.timeout, "timeout", 5*time.Minute, "with --apply, how long to wait for each Sync to be Ready and to list every object")
	cmd.AddCommand(&cobra.Command{
		Use:   "flux [NAME]",
		Short: "Translate Flux Kustomizations (and their GitRepository or OCIRepository) into Syncs",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, kube, args, (*oldReader).readFlux)
		},
	})
	cmd.AddCommand(&cobra.Command{
		Use:   "argocd [NAME]",
		Short: "Translate Argo CD Applications with one git source into Syncs",
		Args:  cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return f.run(cmd, kube, args, (*oldReader).readArgo)
		},
	})
	return cmd
}

type readFunc func(o *oldReader, ctx context.Context, ns, name string) ([]*migration, error)

func (f *migrateFlags) run(cmd *cobra.Command, kube *kubeFlags, args []string, read readFunc) error {
	fail := func(err error) error { return &exitError{code: exitCodeError, err: err} }
	if f.output != "yaml" && f.output != "json" {
		return fail(fmt.Errorf("--output %q: want yaml or json", f.output))
	}
	ns, name := kube.namespace(), ""
	if len(args) == 1 {
		name = args[0]
	}
	if f.allNamespaces {
		if name != "" {
			return fail(errors.New("a NAME needs one namespace: drop --all-namespaces"))
		}
		ns = ""
	}
	cfg, err := kube.restConfig()
	if err != nil {
		return fail(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return fail(err)
	}
	disc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return fail(err)
	}
	ctx := cmd.Context()
	migs, err := read(&oldReader{dc: dc, disc: disc, gvrs: map[string]schema.GroupVersionResource{}}, ctx, ns, name)
	if err != nil {
		return fail(err)
	}
	plan, err := newMigrationPlan(migs, f)
	if err != nil {
		return fail(err)
	}
	c, err := newSyncClient(cfg)
	if err != nil {
		return fail(err)
	}
	h := &handover{c: c, dc: dc, timeout: f.timeout, suspend: f.suspendSource}
	switch {
	case f.dryRun:
		err = h.dryRun(ctx, plan)
	case f.apply && (len(plan.NotTranslated) == 0 || f.allowPartial):
		err = h.run(ctx, plan, cmd.ErrOrStderr())
		for _, r := range plan.HandOvers {
			if r.Suspended {
				plan.Suspend = append(plan.Suspend, r.From)
			}
		}
	case f.apply:
		plan.Result = "nothing applied: some fields are not translated (--allow-partial applies the rest)"
	}
	if werr := plan.write(cmd.OutOrStdout(), cmd.ErrOrStderr(), f.output); werr != nil && err == nil {
		err = werr
	}
	if err != nil {
		return fail(err)
	}
	if len(plan.NotTranslated) > 0 && !f.allowPartial {
		return &exitError{code: exitCodeChanges, err: fmt.Errorf("%d fields %w (--allow-partial accepts them)", len(plan.NotTranslated), errPartial)}
	}
	return nil
}

// migrationPlan is what "converge migrate" prints: the Syncs, what is not translated, the
// warnings, what is (or would be) suspended, and the outcome of --apply.
type migrationPlan struct {
	DryRun        bool             `json:"dryRun"`
	Syncs         []map[string]any `json:"syncs"`
	NotTranslated []untranslated   `json:"notTranslated"`
	Warnings      []string         `json:"warnings,omitempty"`
	// Suspend names the old objects suspended once adopted (with --dry-run: to suspend).
	Suspend []string `json:"suspend"`
	// HandOvers are the outcomes of --apply, one per Sync.
	HandOvers []handOverResult `json:"handOvers,omitempty"`
	Result    string           `json:"result,omitempty"`

	migs []*migration
}

func newMigrationPlan(migs []*migration, f *migrateFlags) (*migrationPlan, error) {
	p := &migrationPlan{DryRun: f.dryRun, Syncs: []map[string]any{}, NotTranslated: []untranslated{}, Suspend: []string{}, migs: migs}
	for _, m := range migs {
		p.NotTranslated = append(p.NotTranslated, m.NotTranslated...)
		p.Warnings = append(p.Warnings, m.Warnings...)
		if m.Sync == nil {
			continue
		}
		u, err := syncObject(m)
		if err != nil {
			return nil, err
		}
		p.Syncs = append(p.Syncs, u)
		if f.dryRun && f.suspendSource {
			p.Suspend = append(p.Suspend, m.From)
		}
	}
	p.Warnings = append(p.Warnings, unmetDependencies(migs)...)
	return p, nil
}

// unmetDependencies warns of each dependsOn naming no Sync of this migration: the Sync
// waits (DependencyNotReady) until a Sync of that name exists and is Ready.
func unmetDependencies(migs []*migration) []string {
	made := map[string]bool{}
	for _, m := range migs {
		if m.Sync != nil {
			made[m.Sync.Namespace+"/"+m.Sync.Name] = true
		}
	}
	var out []string
	for _, m := range migs {
		if m.Sync == nil {
			continue
		}
		for _, d := range m.Sync.Spec.DependsOn {
			ns := cmp.Or(d.Namespace, m.Sync.Namespace)
			if !made[ns+"/"+d.Name] {
				out = append(out, fmt.Sprintf("%s: dependsOn %s/%s is not part of this migration: the Sync waits until a Sync of that name is Ready (migrate it too)",
					m.From, ns, d.Name))
			}
		}
	}
	return out
}

// syncObject is the Sync as a user writes it: no status, no creation timestamp.
func syncObject(m *migration) (map[string]any, error) {
	u, err := runtime.DefaultUnstructuredConverter.ToUnstructured(m.Sync)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", m.From, err)
	}
	delete(u, "status")
	if md, ok := u["metadata"].(map[string]any); ok {
		delete(md, "creationTimestamp")
	}
	return u, nil
}

// write prints the plan: -o yaml writes the Syncs to out (ready for kubectl apply -f -) and
// the rest to errOut; -o json writes everything to out, the untranslated fields to errOut too.
func (p *migrationPlan) write(out, errOut io.Writer, format string) error {
	if format == "json" {
		if err := writeStructured(out, p, "json"); err != nil {
			return err
		}
	} else {
		for i, s := range p.Syncs {
			b, err := yaml.Marshal(s)
			if err != nil {
				return err
			}
			if i > 0 {
				fmt.Fprintln(out, "---")
			}
			if _, err := out.Write(b); err != nil {
				return err
			}
		}
	}
	_, err := io.WriteString(errOut, p.text(format == "yaml"))
	return err
}

// text is the plan for people: what is not translated always; warnings, what is suspended
// and the hand-overs when the Syncs went to stdout as YAML.
func (p *migrationPlan) text(all bool) string {
	var b strings.Builder
	if len(p.NotTranslated) > 0 {
		fmt.Fprintf(&b, "Not translated (%d):\n", len(p.NotTranslated))
		for _, u := range p.NotTranslated {
			fmt.Fprintf(&b, "  %s: %s: %s (%s)\n", u.Object, u.Field, u.Value, u.Reason)
		}
	}
	if !all {
		return b.String()
	}
	for _, w := range p.Warnings {
		fmt.Fprintf(&b, "Warning: %s\n", w)
	}
	if p.DryRun {
		for _, s := range p.Syncs {
			md := s["metadata"].(map[string]any)
			fmt.Fprintf(&b, "Sync %s/%s would be applied (dry run)\n", md["namespace"], md["name"])
		}
		for _, s := range p.Suspend {
			fmt.Fprintf(&b, "%s: would be %s once its Sync is Ready and lists every object it applied (dry run)\n", s, suspendedWords(s))
		}
	}
	for _, h := range p.HandOvers {
		fmt.Fprintf(&b, "%s\n", h.line())
	}
	if p.Result != "" {
		fmt.Fprintln(&b, p.Result)
	}
	return b.String()
}
