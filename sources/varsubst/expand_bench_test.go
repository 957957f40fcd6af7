package varsubst

import (
	"fmt"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/converge-dev/converge/sources"
)

// BenchmarkExpand substitutes in 10,000 objects, every one with references (the worst
// case: each is serialized, substituted and decoded again on every reconcile).
func BenchmarkExpand(b *testing.B) {
	const n = 10000
	bundle := &sources.Bundle{Objects: make([]*unstructured.Unstructured, n), Origins: make([]string, n)}
	for i := range n {
		bundle.Objects[i] = &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": fmt.Sprintf("cm-%d", i), "namespace": "apps", "labels": map[string]any{"env": "${env}"}},
			"data":     map[string]any{"region": "${region:=eu-1}", "url": "https://${env}.example.com", "plain": "no reference here"},
		}}
		bundle.Origins[i] = fmt.Sprintf("cm-%d.yaml:1", i)
	}
	vars, err := Merge(Source{Values: map[string]string{"env": "prod"}})
	if err != nil {
		b.Fatal(err)
	}
	b.ResetTimer()
	for range b.N {
		if _, err := Expand(bundle, vars, DefaultOptions()); err != nil {
			b.Fatal(err)
		}
	}
}
