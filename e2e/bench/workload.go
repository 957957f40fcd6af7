package main

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"
)

// The workload: Namespaces, one CRD, and leaf objects of five kinds spread over them.
const (
	numNamespaces = 10
	benchGroup    = "bench.converge.dev"
	crdName       = "widgets." + benchGroup
	nsPrefix      = "bench-"
	perFile       = 50 // objects per generated YAML file
)

// kindPattern gives the kind of leaf i: kindPattern[i%10] gives 30% ConfigMaps, 20% Secrets,
// 20% Services, 20% Deployments and 10% Widgets.
var kindPattern = [10]string{"ConfigMap", "ConfigMap", "ConfigMap", "Secret", "Secret",
	"Service", "Service", "Deployment", "Deployment", "Widget"}

// namespaceName is the name of the n-th workload namespace.
func namespaceName(n int) string { return fmt.Sprintf("%s%02d", nsPrefix, n) }

// generate returns a deterministic mixed workload of n objects in total: the Namespaces,
// the Widget CRD and n-11 leaf objects (at least one).
func generate(n int) []*unstructured.Unstructured {
	objs := make([]*unstructured.Unstructured, 0, max(n, numNamespaces+2))
	for i := range numNamespaces {
		objs = append(objs, obj("v1", "Namespace", "", namespaceName(i), nil))
	}
	objs = append(objs, widgetCRD())
	for i := range max(n-len(objs), 1) {
		objs = append(objs, leaf(i))
	}
	return objs
}

// obj builds an object with the given body fields merged into it.
func obj(apiVersion, kind, ns, name string, body map[string]any) *unstructured.Unstructured {
	u := &unstructured.Unstructured{Object: map[string]any{}}
	for k, v := range body {
		u.Object[k] = v
	}
	u.SetAPIVersion(apiVersion)
	u.SetKind(kind)
	u.SetName(name)
	if ns != "" {
		u.SetNamespace(ns)
	}
	return u
}

// leaf returns the i-th leaf object of the default mix.
func leaf(i int) *unstructured.Unstructured {
	return leafOf(kindPattern[i%len(kindPattern)], i)
}

// leafOf returns the i-th leaf object with the given kind (one of kindPattern's).
func leafOf(kind string, i int) *unstructured.Unstructured {
	ns := namespaceName(i % numNamespaces)
	name := fmt.Sprintf("%s-%05d", strings.ToLower(kind), i)
	labels := map[string]any{"app": name}
	switch kind {
	case "ConfigMap":
		return obj("v1", kind, ns, name, map[string]any{
			"metadata": map[string]any{"labels": labels},
			"data": map[string]any{"key": fmt.Sprintf("value-%d", i),
				"config.yaml": "level: info\nreplicas: 3\nfeatures: [a, b, c]\n"},
		})
	case "Secret":
		return obj("v1", kind, ns, name, map[string]any{
			"type": "Opaque",
			"data": map[string]any{"key": b64(fmt.Sprintf("secret-%d", i)), "user": b64("bench")},
		})
	case "Service":
		return obj("v1", kind, ns, name, map[string]any{"spec": map[string]any{
			"clusterIP": "None", // headless: the local API server has a /24 service range
			"selector":  labels,
			"ports":     []any{map[string]any{"name": "http", "port": int64(80), "targetPort": int64(8080)}},
		}})
	case "Deployment":
		return obj("apps/v1", kind, ns, name, map[string]any{"spec": map[string]any{
			"replicas": int64(2),
			"selector": map[string]any{"matchLabels": labels},
			"template": map[string]any{
				"metadata": map[string]any{"labels": labels},
				"spec": map[string]any{"containers": []any{map[string]any{
					"name": "app", "image": "registry.example/app:1.2.3",
					"ports":     []any{map[string]any{"containerPort": int64(8080)}},
					"resources": map[string]any{"requests": map[string]any{"cpu": "100m", "memory": "64Mi"}},
				}}},
			},
		}})
	default: // Widget
		return obj(benchGroup+"/v1", kind, ns, name, map[string]any{
			"spec": map[string]any{"size": int64(i%7 + 1), "color": "blue"},
		})
	}
}

// b64 is the Secret data encoding of s.
func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// widgetCRD returns the CRD of the Widget kind: namespaced, v1, spec.size and spec.color.
func widgetCRD() *unstructured.Unstructured {
	schema := map[string]any{"type": "object", "properties": map[string]any{
		"spec": map[string]any{"type": "object", "properties": map[string]any{
			"size":  map[string]any{"type": "integer"},
			"color": map[string]any{"type": "string"},
		}},
	}}
	return obj("apiextensions.k8s.io/v1", "CustomResourceDefinition", "", crdName, map[string]any{
		"spec": map[string]any{
			"group": benchGroup,
			"scope": "Namespaced",
			"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": schema},
			}},
		},
	})
}

// writeWorkload writes objs as multi-document YAML under dir: cluster-scoped objects in
// cluster/, the others in one folder per namespace, perFile objects per file.
func writeWorkload(dir string, objs []*unstructured.Unstructured) error {
	groups := map[string][]*unstructured.Unstructured{}
	for _, u := range objs {
		folder := u.GetNamespace()
		if folder == "" {
			folder = "cluster"
		}
		groups[folder] = append(groups[folder], u)
	}
	for folder, us := range groups {
		if err := os.MkdirAll(filepath.Join(dir, folder), 0o755); err != nil {
			return err
		}
		for start := 0; start < len(us); start += perFile {
			var b strings.Builder
			for _, u := range us[start:min(start+perFile, len(us))] {
				y, err := yaml.Marshal(u.Object)
				if err != nil {
					return fmt.Errorf("%s/%s: %w", u.GetKind(), u.GetName(), err)
				}
				b.WriteString("---\n")
				b.Write(y)
			}
			name := filepath.Join(dir, folder, fmt.Sprintf("objects-%05d.yaml", start/perFile))
			if err := os.WriteFile(name, []byte(b.String()), 0o644); err != nil {
				return err
			}
		}
	}
	return nil
}

// isLeaf reports whether u is a workload object rather than a Namespace or the CRD: only
// leaves are changed, drifted or dropped.
func isLeaf(u *unstructured.Unstructured) bool {
	return u.GetKind() != "Namespace" && u.GetKind() != "CustomResourceDefinition"
}

// keyOf identifies u across renders and copies.
func keyOf(u *unstructured.Unstructured) string {
	return u.GetKind() + "/" + u.GetNamespace() + "/" + u.GetName()
}

// pick deterministically chooses round(frac × leaves) leaves of objs (at least one),
// spread over kinds and namespaces by a hash of salt and the object's key.
func pick(objs []*unstructured.Unstructured, salt string, frac float64) map[string]bool {
	type scored struct {
		key  string
		hash uint64
	}
	var leaves []scored
	for _, u := range objs {
		if isLeaf(u) {
			h := sha256.Sum256([]byte(salt + "|" + keyOf(u)))
			leaves = append(leaves, scored{keyOf(u), binary.BigEndian.Uint64(h[:8])})
		}
	}
	sort.Slice(leaves, func(i, j int) bool { return leaves[i].hash < leaves[j].hash })
	k := min(max(int(float64(len(leaves))*frac+0.5), 1), len(leaves))
	out := make(map[string]bool, k)
	for _, l := range leaves[:k] {
		out[l.key] = true
	}
	return out
}

// probePath is the field a git change or an out-of-band edit modifies, per kind.
func probePath(kind string) []string {
	switch kind {
	case "ConfigMap", "Secret":
		return []string{"data", "key"}
	case "Service":
		return nil // a list element; see probe and setProbe
	case "Deployment":
		return []string{"spec", "replicas"}
	default:
		return []string{"spec", "size"}
	}
}

// probe returns the probed field of u as a string, for comparisons.
func probe(u *unstructured.Unstructured) string {
	if u.GetKind() == "Service" {
		ports, _, _ := unstructured.NestedSlice(u.Object, "spec", "ports")
		if len(ports) == 0 {
			return ""
		}
		p, _ := ports[0].(map[string]any)
		return fmt.Sprint(p["targetPort"])
	}
	v, _, _ := unstructured.NestedFieldNoCopy(u.Object, probePath(u.GetKind())...)
	return fmt.Sprint(v)
}

// setProbe sets the probed field of u to a value derived from n (n > 0), valid for its kind.
func setProbe(u *unstructured.Unstructured, n int) {
	switch u.GetKind() {
	case "ConfigMap":
		_ = unstructured.SetNestedField(u.Object, fmt.Sprintf("rev-%d", n), probePath("ConfigMap")...)
	case "Secret":
		_ = unstructured.SetNestedField(u.Object, b64(fmt.Sprintf("rev-%d", n)), probePath("Secret")...)
	case "Service":
		ports, _, _ := unstructured.NestedSlice(u.Object, "spec", "ports")
		if len(ports) > 0 {
			if p, ok := ports[0].(map[string]any); ok {
				p["targetPort"] = int64(9000 + n)
				_ = unstructured.SetNestedSlice(u.Object, ports, "spec", "ports")
			}
		}
	default: // Deployment replicas, Widget size
		_ = unstructured.SetNestedField(u.Object, int64(10+n), probePath(u.GetKind())...)
	}
}

// withChange returns a deep copy of objs in which the picked objects' probed field is set
// from rev: a git change of those objects.
func withChange(objs []*unstructured.Unstructured, picked map[string]bool, rev int) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objs))
	for i, u := range objs {
		out[i] = u.DeepCopy()
		if picked[keyOf(u)] {
			setProbe(out[i], rev)
		}
	}
	return out
}

// split returns deep copies of the objects of objs not in dropped, and of those in it.
func split(objs []*unstructured.Unstructured, dropped map[string]bool) (kept, gone []*unstructured.Unstructured) {
	for _, u := range objs {
		if dropped[keyOf(u)] {
			gone = append(gone, u.DeepCopy())
		} else {
			kept = append(kept, u.DeepCopy())
		}
	}
	return kept, gone
}

// deepCopyAll returns deep copies of objs: engines may sort or edit what they are given.
func deepCopyAll(objs []*unstructured.Unstructured) []*unstructured.Unstructured {
	out := make([]*unstructured.Unstructured, len(objs))
	for i, u := range objs {
		out[i] = u.DeepCopy()
	}
	return out
}
