package sources

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"

	"sigs.k8s.io/yaml"
)

// Overlay holds kustomization fields set beside the source rather than in it: Flux
// Kustomization's inline build fields. As kustomize-controller does, they extend the
// kustomization of the rendered folder before it is built, or, in a folder without one, a
// kustomization generated there that lists the folder's manifests and kustomize folders
// (the ones a plain render would read). CommonMetadata is not here: Flux sets it after
// decryption and substitution (sources/pipeline).
type Overlay struct {
	// Setting names where the fields are written ("spec"): errors name Setting.patches[i],
	// Setting.components[i]...
	Setting string `json:"setting,omitempty"`
	// Patches are appended to the kustomization's patches.
	Patches []Patch `json:"patches,omitempty"`
	// Images are merged into the kustomization's images: an entry of the same name gets
	// the new name, and the tag and digest together when either is set; others are appended.
	Images []Image `json:"images,omitempty"`
	// NamePrefix and NameSuffix, when set, replace the kustomization's own.
	NamePrefix string `json:"namePrefix,omitempty"`
	NameSuffix string `json:"nameSuffix,omitempty"`
	// Components are appended to the kustomization's components: slash paths relative to
	// the rendered folder, which must stay inside the source.
	Components []string `json:"components,omitempty"`
	// IgnoreMissingComponents leaves out the Components the source does not have.
	IgnoreMissingComponents bool `json:"ignoreMissingComponents,omitempty"`
}

// active reports whether o changes a build.
func (o *Overlay) active() bool {
	return o != nil && (len(o.Patches) > 0 || len(o.Images) > 0 || o.NamePrefix != "" || o.NameSuffix != "" ||
		len(o.Components) > 0)
}

// field names one of o's fields in errors.
func (o *Overlay) field(name string) string {
	if o.Setting == "" {
		return name
	}
	return o.Setting + "." + name
}

// checked returns o with the components the source lacks left out when o says so, after
// checking, through the source root r, that every component is a folder inside the source
// (relative to the rendered folder rel, not absolute, no symlink out) and that every patch
// parses as kustomize will read it. Errors are terminal and name the field.
func (o *Overlay) checked(r *os.Root, rel string) (*Overlay, error) {
	out := *o
	out.Components = nil
	var errs []error
	for i, p := range o.Patches {
		if err := checkPatch(p); err != nil {
			errs = append(errs, &InputError{File: o.field(fmt.Sprintf("patches[%d]", i)), Err: err})
		}
	}
	for i, c := range o.Components {
		keep, err := checkComponent(r, rel, c, o.IgnoreMissingComponents)
		if err != nil {
			errs = append(errs, &InputError{File: o.field(fmt.Sprintf("components[%d]", i)), Err: err})
		}
		if keep {
			out.Components = append(out.Components, c)
		}
	}
	return &out, joinErrors(errs)
}

// checkComponent checks the component c of the folder rel and reports whether it exists.
// Kustomize would read an absolute path or a URL too, and ".." out of the source in a
// build on the disk: each is refused here before anything is read, as Flux refuses a
// component that is not "local and relative".
func checkComponent(r *os.Root, rel, c string, ignoreMissing bool) (bool, error) {
	if c == "" || path.IsAbs(c) || filepath.IsAbs(c) || strings.Contains(c, `\`) || isRemote(c) || isRemoteFile(c) ||
		strings.Contains(c, "://") {
		return false, fmt.Errorf("%q: %w: a component is a folder relative to the rendered path", c, ErrPathEscape)
	}
	target, ok := resolve(rel, c)
	if !ok {
		return false, fmt.Errorf("%q: %w", c, ErrPathEscape)
	}
	info, err := r.Stat(target)
	switch {
	case escapes(err):
		return false, fmt.Errorf("%q: %w", c, errSymlinkEscape)
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, syscall.ENOTDIR):
		if ignoreMissing {
			return false, nil
		}
		return false, fmt.Errorf("%q: %w", c, ErrPathNotFound)
	case err != nil:
		return false, fmt.Errorf("%q: %w", c, err)
	case !info.IsDir():
		return false, fmt.Errorf("%q is not a folder: a component is a folder with a kustomization of kind Component", c)
	case target == path.Clean(rel):
		return false, fmt.Errorf("%q is the rendered folder itself: a component is another folder, with a kustomization of kind Component", c)
	}
	if err := checkComponentKind(r, target); err != nil {
		return false, fmt.Errorf("%q %w", c, err)
	}
	return true, nil
}

// maxComponentKustomization bounds the read of a component's kustomization for its kind.
const maxComponentKustomization = 1 << 20

// checkComponentKind checks that the folder target (through r) holds a kustomization of
// kind Component, as kustomize requires of a component, so that the error names the Sync's
// field rather than coming out of the build.
func checkComponentKind(r *os.Root, target string) error {
	for _, name := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
		f, err := r.Open(path.Join(target, name))
		switch {
		case escapes(err):
			return fmt.Errorf("has a %s that is a link: %w", name, errSymlinkEscape)
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return fmt.Errorf("has a %s that cannot be read: %w", name, err)
		}
		raw, err := io.ReadAll(io.LimitReader(f, maxComponentKustomization+1))
		_ = f.Close()
		if err != nil {
			return fmt.Errorf("has a %s that cannot be read: %w", name, err)
		}
		if len(raw) > maxComponentKustomization {
			return fmt.Errorf("has a %s over %d bytes", name, maxComponentKustomization)
		}
		var head struct {
			Kind string `json:"kind"`
		}
		if err := yaml.Unmarshal(raw, &head); err != nil {
			return fmt.Errorf("has a %s that is not YAML: %w", name, err)
		}
		if head.Kind != "Component" {
			kind := head.Kind
			if kind == "" {
				kind = "Kustomization"
			}
			return fmt.Errorf("is a %s, not a Component: a component's kustomization has kind Component", kind)
		}
		return nil
	}
	return errors.New("has no kustomization (kustomization.yaml, kustomization.yml or Kustomization): a component is a folder with a kustomization of kind Component")
}

// checkPatch reads p as kustomize's patch transformer does: a JSON6902 patch (a list of
// operations, as JSON or YAML) or one or more strategic merge patches (YAML objects), not
// both, and several strategic merge patches only without a target. Kustomize's own
// message on such a patch names neither the Sync field nor the patch.
func checkPatch(p Patch) error {
	text := strings.TrimSpace(p.Patch)
	if text == "" {
		return errors.New("the patch is empty")
	}
	if ops, jsonErr := jsonPatchOps(text); jsonErr == nil {
		if len(ops) == 0 {
			return errors.New("the JSON6902 patch has no operation")
		}
		for i, op := range ops {
			if s, _ := op["op"].(string); s == "" {
				return fmt.Errorf("operation %d of the JSON6902 patch has no op", i)
			}
		}
		return nil
	}
	var n int
	for _, d := range splitDocuments([]byte(text)) {
		var m map[string]any
		if err := yaml.Unmarshal(d.data, &m); err != nil {
			return fmt.Errorf("neither a JSON6902 patch (a list of operations) nor a strategic merge patch: line %d: %w", d.line, err)
		}
		if m == nil {
			continue
		}
		if _, ok := m["kind"].(string); !ok && p.Target == nil {
			return fmt.Errorf("the strategic merge patch at line %d has no kind, and the patch has no target", d.line)
		}
		n++
	}
	switch {
	case n == 0:
		return errors.New("the patch holds no object")
	case n > 1 && p.Target != nil:
		return errors.New("several strategic merge patches in one entry cannot share a target: give each its own entry")
	}
	return nil
}

// jsonPatchOps decodes text as kustomize decodes a JSON6902 patch: JSON when it starts
// with "[", else YAML, into a list of objects.
func jsonPatchOps(text string) ([]map[string]any, error) {
	js := []byte(text)
	if !strings.HasPrefix(text, "[") {
		var err error
		if js, err = yaml.YAMLToJSON(js); err != nil {
			return nil, err
		}
	}
	var ops []map[string]any
	return ops, json.Unmarshal(js, &ops)
}

// extend returns the kustomization data with o's fields written into it, as Flux's
// generator does (fluxcd/pkg/kustomize): patches and components appended, images merged by
// name, namePrefix and nameSuffix replaced. The rest of data is kept as written.
func (o *Overlay) extend(data []byte) ([]byte, error) {
	k := map[string]any{}
	if err := yaml.Unmarshal(data, &k); err != nil {
		return nil, err // not reached: kustomize read it before
	}
	if k == nil {
		k = map[string]any{}
	}
	if o.NamePrefix != "" {
		k["namePrefix"] = o.NamePrefix
	}
	if o.NameSuffix != "" {
		k["nameSuffix"] = o.NameSuffix
	}
	patches, _ := k["patches"].([]any)
	for _, p := range o.Patches {
		e := map[string]any{"patch": p.Patch}
		if p.Target != nil {
			e["target"] = p.Target
		}
		patches = append(patches, e)
	}
	if len(patches) > 0 {
		k["patches"] = patches
	}
	components, _ := k["components"].([]any)
	for _, c := range o.Components {
		components = append(components, c)
	}
	if len(components) > 0 {
		k["components"] = components
	}
	if images := mergeImages(k["images"], o.Images); len(images) > 0 {
		k["images"] = images
	}
	return yaml.Marshal(k)
}

// mergeImages merges images into a kustomization's images field (have): an entry of the
// same name takes the new name when set, and the tag and digest as one (setting either
// clears the other, as kustomize's image transformer replaces both); others are appended.
func mergeImages(have any, images []Image) []any {
	list, _ := have.([]any)
	for _, im := range images {
		i := indexImage(list, im.Name)
		if i < 0 {
			e := map[string]any{"name": im.Name}
			set := func(k, v string) {
				if v != "" {
					e[k] = v
				}
			}
			set("newName", im.NewName)
			set("newTag", im.NewTag)
			set("digest", im.Digest)
			list = append(list, e)
			continue
		}
		e := list[i].(map[string]any)
		if im.NewName != "" {
			e["newName"] = im.NewName
		}
		if im.NewTag != "" || im.Digest != "" {
			delete(e, "newTag")
			delete(e, "digest")
			if im.NewTag != "" {
				e["newTag"] = im.NewTag
			}
			if im.Digest != "" {
				e["digest"] = im.Digest
			}
		}
	}
	return list
}

func indexImage(list []any, name string) int {
	for i, e := range list {
		if m, ok := e.(map[string]any); ok && m["name"] == name {
			return i
		}
	}
	return -1
}

// generatedKustomization is the kustomization Flux generates in a folder without one: its
// resources are the folder's manifests and kustomize folders (units, below the folder
// rel), relative to it.
func generatedKustomization(rel string, units []unit) ([]byte, error) {
	resources := make([]string, 0, len(units))
	for _, u := range units {
		r := strings.TrimPrefix(u.rel, rel+"/")
		if rel == "." {
			r = u.rel
		}
		resources = append(resources, r)
	}
	return yaml.Marshal(map[string]any{"apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization",
		"resources": resources})
}

// checkOverlay returns the render's overlay checked (Overlay.checked), nil when it changes
// nothing. The fields extend a kustomize build: a Helm chart, a single file and a build on
// the disk (remote bases) cannot take them.
func checkOverlay(r *os.Root, rel string, info fs.FileInfo, opts RenderOptions) (*Overlay, error) {
	o := opts.Overlay
	if !o.active() {
		return nil, nil
	}
	switch {
	case opts.Helm != nil:
		return nil, &InputError{File: o.field("patches"), Err: errors.New("patches, images, namePrefix, nameSuffix and components change a kustomize build, not a Helm chart: use spec.source.helm.postRenderers")}
	case !info.IsDir():
		return nil, &InputError{File: rel, Err: errors.New("patches, images, namePrefix, nameSuffix and components need the path to be a folder")}
	case opts.AllowRemoteBases:
		return nil, &InputError{File: rel, Err: errors.New("patches, images, namePrefix, nameSuffix and components cannot be set with remote bases allowed")}
	}
	c, err := o.checked(r, rel)
	if err != nil || !c.active() {
		return nil, err // every component missing and ignored: nothing left to change
	}
	return c, nil
}

// overlayEdit returns how the kustomization of u is rewritten for the render's overlay
// (reacher.edit): extended, or generated over the folder's manifests first when u has
// none. nil: not rewritten.
func overlayEdit(ctx context.Context, root string, u unit, opts RenderOptions, b *budget) (func([]byte) ([]byte, error), error) {
	o := opts.Overlay
	if !o.active() {
		return nil, nil
	}
	if !u.generate {
		return o.extend, nil
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return nil, fmt.Errorf("%s: open source: %w", u.rel, err)
	}
	defer func() { _ = r.Close() }()
	units, err := walk(ctx, r, u.rel, b.limits, newIgnoredSet(opts.Ignored))
	if err != nil {
		return nil, err
	}
	gen, err := generatedKustomization(u.rel, units)
	if err != nil {
		return nil, err
	}
	return func([]byte) ([]byte, error) { return o.extend(gen) }, nil
}

// overlayKey is o as part of a render cache key: its fields, hashed ("" for none).
func overlayKey(o *Overlay) string {
	if o == nil {
		return ""
	}
	js, err := json.Marshal(o)
	if err != nil {
		return fmt.Sprintf("unkeyable:%p", o) // never equal to another render's key
	}
	sum := sha256.Sum256(js)
	return hex.EncodeToString(sum[:])
}

// describe names the fields o sets, for a failed build's message ("spec.patches,
// spec.namePrefix"); "" when none.
func (o *Overlay) describe() string {
	if !o.active() {
		return ""
	}
	var set []string
	for _, f := range []struct {
		name string
		set  bool
	}{{"patches", len(o.Patches) > 0}, {"images", len(o.Images) > 0}, {"namePrefix", o.NamePrefix != ""},
		{"nameSuffix", o.NameSuffix != ""}, {"components", len(o.Components) > 0}} {
		if f.set {
			set = append(set, o.field(f.name))
		}
	}
	return strings.Join(set, ", ")
}
