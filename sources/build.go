package sources

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"
	"regexp"

	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/resmap"
	"sigs.k8s.io/kustomize/api/resource"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
)

// kustomizeLock serializes in-process kustomize builds: kyaml keeps global state (the
// OpenAPI schema) and is not safe for concurrent use. A channel, unlike a mutex, lets a
// waiter give up. Isolated builds do not take it: each child has its own kyaml.
var kustomizeLock = make(chan struct{}, 1)

// build runs kustomize on the folder u.rel, in a child process when opts.Isolate is set,
// counting what it reads and renders in b.
func build(ctx context.Context, root string, u unit, opts RenderOptions, b *budget) ([]decoded, error) {
	if opts.Isolate {
		return buildIsolated(ctx, root, u, opts, b)
	}
	in, err := prepare(ctx, root, u, opts, b) // outside the lock: reading files is safe in parallel
	if err != nil {
		return nil, err
	}
	select {
	case kustomizeLock <- struct{}{}:
	case <-ctx.Done():
		return nil, context.Cause(ctx)
	}
	defer func() { <-kustomizeLock }()
	resources, ordered, err := in.run(ctx)
	if err != nil {
		return nil, err
	}
	return decodeResources(u, resources, ordered, b)
}

// kustomize builds the folder u.rel and returns its resources as JSON; a render child
// runs it.
func kustomize(ctx context.Context, root string, u unit, opts RenderOptions, b *budget) ([][]byte, map[int]string, error) {
	in, err := prepare(ctx, root, u, opts, b)
	if err != nil {
		return nil, nil, err
	}
	return in.run(ctx)
}

// buildInput is what a kustomize build reads: a file system and the folder in it.
type buildInput struct {
	fsys   filesys.FileSystem
	dir    string
	file   string // the kustomization, for messages
	rel    string
	limits Limits
	// disk: fsys is the disk (remote bases allowed), not a private in-memory copy of the
	// source root, rooted at "/".
	disk bool
	// chunkObjects sizes the chunks of a chunked build (chunked.go); 0 never chunks.
	chunkObjects int
	// overlay names the inline fields the kustomization was extended with (Overlay), for
	// messages; "" for none.
	overlay string
	// macs are the source's documents with SOPS metadata by their MAC, read on first need
	// (sopsDocument).
	macs map[string][]byte
}

// prepare readies a build of u. Without remote bases the build reads an in-memory copy of
// what its kustomization reaches in the source (reach.go), so no kustomization can read
// outside the source, and every reference that would be fetched is refused first (see
// refuseRemote).
func prepare(ctx context.Context, root string, u unit, opts RenderOptions, b *budget) (*buildInput, error) {
	in := &buildInput{fsys: filesys.MakeFsOnDisk(), dir: filepath.Join(root, filepath.FromSlash(u.rel)),
		file: path.Join(u.rel, u.kustomization), rel: u.rel, limits: b.limits, chunkObjects: chunkObjects}
	if opts.WholeKustomize {
		in.chunkObjects = 0
	}
	if opts.AllowRemoteBases {
		in.disk = true
		return in, nil
	}
	edit, err := overlayEdit(ctx, root, u, opts, b)
	if err != nil {
		return nil, err
	}
	fsys, err := reach(ctx, root, u.rel, in.file, b, newIgnoredSet(opts.Ignored), edit)
	if err != nil {
		return nil, err
	}
	in.fsys, in.dir, in.overlay = fsys, path.Join("/", u.rel), opts.Overlay.describe()
	if err := refuseRemote(fsys, in.dir, map[string]bool{}); err != nil {
		return nil, err
	}
	return in, nil
}

// run builds with krusty (no plugins, no Helm, root-only loads), recovering a panic: in
// chunks when the kustomization allows it (chunked.go), else whole. It returns each
// resource as JSON and, for those with SOPS metadata, the document of the source they were
// built from, as written (ordered, by index): the SOPS MAC depends on field order, which
// kustomize does not keep.
func (in *buildInput) run(ctx context.Context) (resources [][]byte, ordered map[int]string, err error) {
	fail := func(err error) error { return &InputError{File: in.file, Err: err} }
	defer func() {
		if r := recover(); r != nil {
			resources, ordered, err = nil, nil, fail(fmt.Errorf("kustomize build panicked: %v", r))
		}
	}()
	var out []*resource.Resource
	chunked := false
	if plan := in.plan(); plan != nil {
		if out, chunked, err = in.runChunked(plan); err != nil {
			return nil, nil, err
		}
	}
	if !chunked {
		m, err := in.krusty()
		if err != nil {
			return nil, nil, err
		}
		out = m.Resources()
	}
	if n := len(out); n > in.limits.MaxObjects {
		return nil, nil, tooManyObjects(in.file, n, in.limits.MaxObjects)
	}
	var errs []error
	for _, r := range out {
		js, err := r.MarshalJSON()
		if err != nil {
			errs = append(errs, fail(fmt.Errorf("kustomize output: %w", err)))
			continue
		}
		if mac, err := r.GetString("sops.mac"); err == nil && mac != "" {
			// kustomize prints fields sorted: the document as written is found by its MAC,
			// a ciphertext with a random nonce, so unique to one encryption.
			if doc := in.sopsDocument(mac); doc != nil {
				if ordered == nil {
					ordered = map[int]string{}
				}
				ordered[len(resources)] = string(doc)
			}
		}
		resources = append(resources, js)
	}
	return resources, ordered, errors.Join(errs...)
}

// krusty runs one kustomize build of in.dir.
func (in *buildInput) krusty() (resmap.ResMap, error) {
	ko := krusty.MakeDefaultOptions() // no plugins, no Helm, input order kept
	ko.LoadRestrictions = types.LoadRestrictionsRootOnly
	m, err := krusty.MakeKustomizer(ko).Run(in.fsys, in.dir)
	if urls := refusedURLs(); len(urls) > 0 {
		// Only in a render child: kustomize asked for the network in a field that
		// refuseRemote does not know. Name where the URL is written.
		where, field := locateURL(in.fsys, urls[0])
		if where == "" {
			where, field = in.file, "a field"
		}
		return nil, &InputError{File: where, Err: fmt.Errorf("%s: %w: refusing to fetch %q (set AllowRemoteBases to load it)", field, ErrRemoteBase, urls[0])}
	}
	if err != nil {
		if in.overlay != "" {
			return nil, &InputError{File: in.file, Err: fmt.Errorf("kustomize build with %s: %w", in.overlay, err)}
		}
		return nil, &InputError{File: in.file, Err: fmt.Errorf("kustomize build: %w", err)}
	}
	return m, nil
}

// sopsDocument returns the YAML document of the source whose SOPS MAC is mac, or nil. Only
// the in-memory copy of the source is searched (not a disk with remote bases). The source is
// read once per build, on the first call: a repository of many encrypted objects and many
// files costs one pass, not one per object.
func (in *buildInput) sopsDocument(mac string) []byte {
	if in.disk {
		return nil
	}
	if in.macs == nil {
		in.macs = map[string][]byte{}
		_ = in.fsys.Walk("/", func(p string, info fs.FileInfo, err error) error {
			if err != nil || info.IsDir() || !isManifest(path.Base(p)) {
				return nil
			}
			data, err := in.fsys.ReadFile(p)
			if err != nil || !bytes.Contains(data, []byte("mac:")) {
				return nil
			}
			for _, d := range splitDocuments(data) {
				for _, m := range sopsMAC.FindAllSubmatch(d.data, -1) {
					if prev, seen := in.macs[string(m[1])]; seen && !bytes.Equal(prev, d.data) {
						// Two documents claim one encryption: a copy. Trust neither; the
						// object is then decrypted as rendered, and its MAC decides.
						in.macs[string(m[1])] = nil
						continue
					}
					in.macs[string(m[1])] = d.data
				}
			}
			return nil
		})
	}
	return in.macs[mac]
}

// sopsMAC finds the value of a "mac" field in a YAML or JSON document, as sops writes it
// ("ENC[AES256_GCM,data:...,iv:...,tag:...,type:str]", quoted or not).
var sopsMAC = regexp.MustCompile(`["']?\bmac["']?\s*:\s*["']?(ENC\[[^\]\s"']*\])`)

// decodeResources decodes and checks the JSON resources of a kustomize build, counting
// them in b.
func decodeResources(u unit, resources [][]byte, ordered map[int]string, b *budget) (objs []decoded, err error) {
	loc := location{file: path.Join(u.rel, u.kustomization)}
	var errs []error
	for i, js := range resources {
		var obj map[string]any
		if err := utiljson.Unmarshal(js, &obj); err != nil {
			errs = append(errs, loc.wrap("", fmt.Errorf("kustomize output: %w", err)))
			continue
		}
		d, err := flatten(obj, loc)
		if y, ok := ordered[i]; ok && len(d) == 1 {
			d[0].ordered = []byte(y)
		}
		errs = append(errs, err)
		objs = append(objs, d...)
	}
	if err := b.decoded(len(objs)); err != nil {
		return nil, err
	}
	return objs, errors.Join(errs...)
}
