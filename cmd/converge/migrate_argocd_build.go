package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// Argo CD's ignoreDifferences and kustomize options, in a Sync's spec.ignore and build fields.

// Reasons an Argo CD field is not translated.
const (
	reasonJQ = "a jq path expression: write the fields it selects as jsonPointers (spec.ignore[].paths)"
	// kustomize's commonLabels also set selectors and pod template labels, its
	// commonAnnotations pod template annotations: spec.commonMetadata sets only the objects'
	// own, so translating them would change every workload's Pods (a rollout).
	reasonCommonLabels      = "kustomize's commonLabels also set selectors and pod template labels, spec.commonMetadata only the objects' own (it translates with labelWithoutSelector: true): put them in the source's kustomization.yaml"
	reasonCommonAnnotations = "kustomize's commonAnnotations also set pod template annotations, spec.commonMetadata only the objects' own: put them in the source's kustomization.yaml"
	reasonGlob              = "a glob a Sync's target cannot express (only * and ? translate)"
)

// translateArgoIgnore reads spec.ignoreDifferences into spec.ignore: each entry's group and
// kind (globs), name and namespace (exact, empty for any), jsonPointers and
// managedFieldsManagers become one rule; jqPathExpressions are not translated, naming the
// entry. An entry left with neither paths nor managers makes no rule. respected says the
// Application had RespectIgnoreDifferences=true; without it Argo CD still set the ignored
// fields whenever it synced, while a Sync never sets them on an existing object.
func translateArgoIgnore(r *specReader, m *migration, s *v1alpha1.Sync, spec map[string]any, respected bool) {
	entries := r.objects(spec, "spec", "ignoreDifferences")
	for i, e := range entries {
		f := fmt.Sprintf("spec.ignoreDifferences[%d]", i)
		r.untranslate(f+".jqPathExpressions", e["jqPathExpressions"], reasonJQ)
		r.rest(e, f, reasonNoSyncKey, "group", "kind", "name", "namespace", "jsonPointers", "managedFieldsManagers", "jqPathExpressions")
		rule := v1alpha1.IgnoreRule{Paths: r.strings(e, f, "jsonPointers"), Managers: r.strings(e, f, "managedFieldsManagers")}
		for j, p := range rule.Paths {
			if !strings.HasPrefix(p, "/") {
				r.malformed(fmt.Sprintf("%s.jsonPointers[%d]", f, j), "a JSON pointer (starting with /)", p)
			}
		}
		target, ok := argoTarget(r, e, f)
		if !ok || len(rule.Paths) == 0 && len(rule.Managers) == 0 {
			continue
		}
		rule.Target = target
		s.Spec.Ignore = append(s.Spec.Ignore, rule)
	}
	if len(s.Spec.Ignore) > 0 && !respected {
		m.Warnings = append(m.Warnings, m.From+": spec.ignore leaves the ignoreDifferences fields alone on every apply; without RespectIgnoreDifferences=true Argo CD still set them when it synced")
	}
}

// argoTarget is the target of an ignoreDifferences entry: Argo CD matches group and kind as
// globs (an empty group is the core group only) and name and namespace exactly; false when
// a glob has more than * and ? (reported).
func argoTarget(r *specReader, e map[string]any, field string) (*v1alpha1.PatchSelector, bool) {
	t := &v1alpha1.PatchSelector{Name: exactRegex(r.str(e, field, "name")), Namespace: exactRegex(r.str(e, field, "namespace"))}
	group, kind := r.str(e, field, "group"), r.str(e, field, "kind")
	var ok bool
	if t.Group, ok = globRegex(group); !ok {
		r.untranslate(field+".group", group, reasonGlob)
		return nil, false
	}
	if group == "" {
		t.Group = "^$" // the core group: an empty selector field would match every group
	}
	if t.Kind, ok = globRegex(kind); !ok {
		r.untranslate(field+".kind", kind, reasonGlob)
		return nil, false
	}
	return t, true
}

// globRegex is the regular expression (matched whole) of an Argo CD glob made of literal
// characters, * and ?: "" for "" and for "*" (any); false for other glob syntax.
func globRegex(glob string) (string, bool) {
	if glob == "*" || glob == "" {
		return "", true
	}
	if strings.ContainsAny(glob, `[]{}\!`) {
		return "", false
	}
	var b strings.Builder
	for _, c := range glob {
		switch c {
		case '*':
			b.WriteString(".*")
		case '?':
			b.WriteString(".")
		default:
			b.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	return b.String(), true
}

// exactRegex is the regular expression matching s alone ("" for "": any).
func exactRegex(s string) string {
	return regexp.QuoteMeta(s)
}

// translateArgoKustomize reads spec.source.kustomize into the Sync's build fields:
// namePrefix and nameSuffix (each replaces the kustomization's own, as Argo CD's
// `kustomize edit set nameprefix` does), images, and commonLabels where they set only the
// objects' own labels (labelWithoutSelector without labelIncludeTemplates). The rest is not
// translated.
func translateArgoKustomize(r *specReader, m *migration, s *v1alpha1.Sync, k map[string]any) {
	const f = "spec.source.kustomize"
	b := &s.Spec.BuildFields
	b.NamePrefix, b.NameSuffix = r.str(k, f, "namePrefix"), r.str(k, f, "nameSuffix")
	var partial []string
	for i, im := range r.strings(k, f, "images") {
		img, ok := argoImage(im)
		if !ok {
			r.untranslate(fmt.Sprintf("%s.images[%d]", f, i), im, "not an image override kustomize reads (name=newName:newTag, name:newTag, name@digest)")
			continue
		}
		if img.NewName == "" || img.NewTag == "" || img.Digest == "" {
			partial = append(partial, img.Name)
		}
		b.Images = append(b.Images, img)
	}
	if len(partial) > 0 {
		m.Warnings = append(m.Warnings, fmt.Sprintf("%s: spec.images entries keep the newName, newTag or digest they do not set from the kustomization's own entry for %s, which Argo CD's entry replaced whole: check the kustomization at %s",
			m.From, strings.Join(partial, ", "), s.Spec.Path))
	}
	known := []string{"namePrefix", "nameSuffix", "images"}
	if labels := r.stringMap(k, f, "commonLabels"); labels != nil {
		if r.boolean(k, f, "labelWithoutSelector") && !r.boolean(k, f, "labelIncludeTemplates") {
			b.CommonMetadata = &v1alpha1.CommonMetadata{Labels: labels}
			known = append(known, "commonLabels", "labelWithoutSelector", "labelIncludeTemplates", "forceCommonLabels")
		} else {
			r.untranslate(f+".commonLabels", k["commonLabels"], reasonCommonLabels)
			known = append(known, "commonLabels")
		}
	}
	r.untranslate(f+".commonAnnotations", k["commonAnnotations"], reasonCommonAnnotations)
	known = append(known, "commonAnnotations")
	r.rest(k, f, reasonBuild, known...)
}

// imageTag is kustomize's <image>:<tag> (a tag has no / or :, so a registry port is not one).
var imageTag = regexp.MustCompile(`^(.*):([a-zA-Z0-9._-]*|\*)$`)

// argoImage parses an Argo CD kustomize image override as `kustomize edit set image` does:
// [name=]newName[:newTag][@digest], or name:newTag, or name@digest; a "*" part keeps the
// kustomization's own value, as an unset field of a Sync's image entry does.
func argoImage(s string) (v1alpha1.KustomizeImage, bool) {
	name, value, renamed := strings.Cut(s, "=")
	if !renamed {
		value = s
	}
	rest, digest, _ := strings.Cut(value, "@")
	newName, tag := rest, ""
	if t := imageTag.FindStringSubmatch(rest); t != nil {
		newName, tag = t[1], t[2]
	}
	img := v1alpha1.KustomizeImage{Name: name, NewName: newName, NewTag: tag, Digest: digest}
	if !renamed {
		img.Name, img.NewName = newName, ""
		if tag == "" && digest == "" {
			return img, false // a bare name overrides nothing
		}
	}
	for _, p := range []*string{&img.NewName, &img.NewTag, &img.Digest} {
		if *p == "*" {
			*p = ""
		}
	}
	return img, img.Name != "" && !strings.ContainsAny(img.Name, "=@")
}
