package main

import (
	"fmt"
	"regexp"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// argoInterval is Argo CD's default reconciliation period (timeout.reconciliation), kept as
// the Sync's interval so the cadence does not change with the move.
const argoInterval = 3 * time.Minute

// inCluster reports whether an Application's destination is the cluster Argo CD runs in.
func inCluster(server, name string) bool {
	return (server == "" || server == "https://kubernetes.default.svc") && (name == "" || name == "in-cluster")
}

var versionTag = regexp.MustCompile(`^v?[0-9]+\.[0-9]+`)

// translateApplication translates an Argo CD Application with one git source (a kustomize
// or plain YAML path) into a Sync in the Application's namespace, of the same name,
// adopting the objects Argo CD applied.
func translateApplication(app *unstructured.Unstructured) (*migration, error) {
	r := &specReader{name: describeObject(app)}
	m := &migration{From: r.name, old: app}
	spec := r.object(app.Object, "", "spec")
	if spec == nil {
		return nil, fmt.Errorf("%s: no spec", r.name)
	}
	s := newSync(app, m.From)
	s.Spec.Interval = metav1.Duration{Duration: argoInterval}
	s.Spec.Wait = true // Argo CD reports an Application Healthy once its objects are
	// Argo CD deletes an Application's objects with it only under its resources finalizer.
	s.Spec.DeletionPolicy = v1alpha1.DeletionPolicyOrphan
	for _, f := range app.GetFinalizers() {
		if strings.HasPrefix(f, "resources-finalizer.argocd.argoproj.io") {
			s.Spec.DeletionPolicy = v1alpha1.DeletionPolicyDelete
		}
	}
	ok := translateArgoSource(r, m, s, spec)
	dst := r.object(spec, "spec", "destination")
	server, name := r.str(dst, "spec.destination", "server"), r.str(dst, "spec.destination", "name")
	if !inCluster(server, name) {
		r.untranslate("spec.destination", dst, "a Sync applies to its own cluster only")
		ok = false
	}
	if ns := r.str(dst, "spec.destination", "namespace"); ns != "" {
		s.Spec.TargetNamespace = ns
		m.Warnings = append(m.Warnings, fmt.Sprintf("%s: spec.targetNamespace %s puts every namespaced object in it; Argo CD's destination.namespace only filled in objects without a namespace",
			m.From, ns))
	}
	respected := translateArgoPolicy(r, m, s, spec)
	if p := r.str(spec, "spec", "project"); p != "" && p != "default" {
		r.untranslate("spec.project", p, "a Sync is limited by its spec.serviceAccountName's RBAC, not by an AppProject")
	}
	translateArgoIgnore(r, m, s, spec, respected)
	r.rest(spec, "spec", reasonNoSyncKey, "source", "sources", "destination", "syncPolicy", "project",
		"ignoreDifferences", "info", "revisionHistoryLimit")
	m.Applied = argoResources(r, app)
	if err := r.err(); err != nil {
		return nil, err
	}
	if ok {
		m.Sync = s
	} else {
		m.Warnings = nil // about a Sync that is not made
	}
	m.NotTranslated = r.skip
	return m, nil
}

// translateArgoSource reads spec.source; false when the Application has no single git
// source a Sync can read.
func translateArgoSource(r *specReader, m *migration, s *v1alpha1.Sync, spec map[string]any) bool {
	if _, ok := spec["sources"]; ok {
		r.untranslate("spec.sources", spec["sources"], "a Sync has one source: make one Application (and Sync) per source")
		return false
	}
	src := r.object(spec, "spec", "source")
	if src == nil {
		r.errs = append(r.errs, "spec.source: missing")
		return false
	}
	ok := true
	if c := r.str(src, "spec.source", "chart"); c != "" {
		r.untranslate("spec.source.chart", c, "a Helm repository source: write the Sync with spec.source.helmRepository")
		ok = false
	}
	for _, k := range []string{"helm", "plugin"} {
		if v, set := src[k]; set {
			r.untranslate("spec.source."+k, v, "a Sync renders kustomize or plain YAML from git here")
			ok = false
		}
	}
	s.Spec.Source.Git = &v1alpha1.GitSource{URL: r.str(src, "spec.source", "repoURL")}
	s.Spec.Source.Git.Ref = argoRevision(m, r.str(src, "spec.source", "targetRevision"))
	s.Spec.Path = cleanPath(r.str(src, "spec.source", "path"))
	if k := r.object(src, "spec.source", "kustomize"); k != nil {
		translateArgoKustomize(r, m, s, k)
	}
	d := r.object(src, "spec.source", "directory")
	// A Sync reads a plain YAML folder's subfolders too, as directory.recurse does.
	if src["kustomize"] == nil && !r.boolean(d, "spec.source.directory", "recurse") {
		m.Warnings = append(m.Warnings, m.From+": without a kustomization.yaml a Sync reads the YAML of spec.path's subfolders too (Argo CD's directory.recurse: true): check that they hold nothing to leave out")
	}
	r.rest(d, "spec.source.directory", reasonNoSyncKey, "recurse")
	r.rest(src, "spec.source", reasonNoSyncKey, "repoURL", "targetRevision", "path", "chart", "helm",
		"plugin", "kustomize", "directory")
	return ok
}

// argoRevision translates targetRevision, which Argo CD resolves as a commit, a branch or a
// tag, whichever exists: a Sync names which.
func argoRevision(m *migration, rev string) v1alpha1.GitRef {
	switch {
	case rev == "" || rev == "HEAD":
		m.Warnings = append(m.Warnings, fmt.Sprintf("%s: targetRevision %q (the default branch) became branch main: set spec.source.git.ref.branch if the default branch is another",
			m.From, rev))
		return v1alpha1.GitRef{Branch: "main"}
	case commitSHA1.MatchString(rev):
		return v1alpha1.GitRef{Commit: rev}
	case strings.HasPrefix(rev, "refs/heads/") || strings.HasPrefix(rev, "refs/tags/"):
		g, _ := fluxRefName(rev)
		return g
	case versionTag.MatchString(rev):
		m.Warnings = append(m.Warnings, fmt.Sprintf("%s: targetRevision %q became tag %s: set ref.branch if it is a branch", m.From, rev, rev))
		return v1alpha1.GitRef{Tag: rev}
	}
	m.Warnings = append(m.Warnings, fmt.Sprintf("%s: targetRevision %q became branch %s: set ref.tag if it is a tag", m.From, rev, rev))
	return v1alpha1.GitRef{Branch: rev}
}

// translateArgoPolicy reads spec.syncPolicy; true when its sync options have
// RespectIgnoreDifferences=true (a Sync always respects spec.ignore).
func translateArgoPolicy(r *specReader, m *migration, s *v1alpha1.Sync, spec map[string]any) (respected bool) {
	pol := r.object(spec, "spec", "syncPolicy")
	auto := r.object(pol, "spec.syncPolicy", "automated")
	if auto == nil {
		m.Warnings = append(m.Warnings, m.From+": no automated sync policy; the Sync applies on every interval (suspend it to keep applying by hand)")
	}
	s.Spec.Prune = r.boolean(auto, "spec.syncPolicy.automated", "prune")
	s.Spec.AllowEmpty = r.boolean(auto, "spec.syncPolicy.automated", "allowEmpty")
	// selfHeal: a Sync always corrects drift on its interval.
	r.rest(auto, "spec.syncPolicy.automated", reasonNoSyncKey, "prune", "allowEmpty", "selfHeal", "enabled")
	opts, _ := pol["syncOptions"].([]any)
	for i, o := range opts {
		switch o {
		case "ServerSideApply=true", "Validate=true", "Prune=true":
			// A Sync always applies server-side, validated.
		case "RespectIgnoreDifferences=true":
			respected = true
		default:
			r.untranslate(fmt.Sprintf("spec.syncPolicy.syncOptions[%d]", i), o, reasonNoSyncKey)
		}
	}
	r.rest(pol, "spec.syncPolicy", reasonNoSyncKey, "automated", "syncOptions")
	return respected
}

// argoResources is the IDs of the objects the Application applied (status.resources).
func argoResources(r *specReader, app *unstructured.Unstructured) []string {
	status := r.object(app.Object, "", "status")
	var ids []string
	for i, e := range r.objects(status, "status", "resources") {
		f := fmt.Sprintf("status.resources[%d]", i)
		ids = append(ids, fmt.Sprintf("%s_%s_%s_%s", r.str(e, f, "namespace"), r.str(e, f, "name"), r.str(e, f, "group"), r.str(e, f, "kind")))
	}
	return ids
}
