// Package sources turns "a git URL, a ref and a path" or a local folder into a revision string
// and a validated list of objects (a Bundle).
//
//   - Load (on a Loader) fetches git through the git sub-package, or digests a local folder,
//     renders the path, and caches renders by (content, path, options), handing out deep
//     copies. Revisions are "main@sha1:<hex>" for git and "sha256:<hex>" of the files for a
//     local folder.
//   - Render builds a folder with a kustomization using krusty (root-only load restrictor,
//     no plugins, remote bases refused unless allowed), on an in-memory copy of what the
//     kustomization reaches (reach.go): its kustomization file, the files and folders its
//     loading fields name (resources, components, patches, generators' files and envs,
//     replacements, crds, configurations, openapi, generator and transformer configs and
//     the paths these name), and recursively the kustomizations of those folders. Nothing
//     else of the source is read or counted against the limits, and nothing outside the
//     source is reachable: a reference that climbs out is refused. Any other folder is
//     decoded directly and in parallel: .yaml/.yml/.json files, recursively, in lexical
//     order, multi-document, Lists flattened, hidden files and folders skipped.
//   - With RenderOptions.Helm, the path is a Helm chart folder rendered template-only as
//     `helm template` does (helm.go, helm_child.go), always in a render child: values
//     merged over values.yaml, release name and namespace, CRDs of crds/ first, the
//     Capabilities given; no lookup, no DNS, no network; the chart folder only is read
//     (subcharts vendored in charts/, as folders or .tgz), within the same limits. Install
//     and upgrade hooks are objects, recreated when an immutable field changes
//     (ForceAnnotation); test, delete and rollback hooks are dropped (keepHook). The
//     chart's objects then go through its post-renderers in the same child: kustomize
//     patches and image overrides on an in-memory kustomization (helm_postrender.go).
//   - Validation names the file, the line, the 1-based document ("document 2 of 3") and the
//     object ("Kind namespace/name"): missing apiVersion, kind or metadata.name, duplicates
//     (both places named), invalid YAML or JSON, broken kustomizations, paths that escape
//     the source or do not exist, and empty renders (ErrEmptyRender).
//
// Kustomize builds run in a child process with RenderOptions.Isolate (isolate.go): no
// network request and no program whatever field names a URL, stopped when the context
// ends, in parallel. Without it they run in this process, serialized and recovered, and
// only the fields refuseRemote knows are checked: for trusted content. Limits bound the
// files read (count and size, refused before reading), the bytes one render reads in all
// (a symlink each time it is read, what each kustomize build reaches) and the objects
// rendered, counted as they are decoded; files are read through os.Root so no symlink
// leads out of the source. A render child keeps only a few variables of the
// parent's environment.
//
// Failures caused by the content are *InputError values and IsTerminal reports them: the
// same revision fails the same way, so callers wait for a new one. Fetch and I/O failures
// are transient.
//
// It must not import kube clients, engine, inventory or status: it never talks to a cluster.
package sources
