// Package sources turns "a git URL, a ref and a path" or a local folder into a revision string
// and a validated list of objects (a Bundle). It fetches git with go-git, builds kustomizations
// with krusty in memory, decodes plain YAML folders directly, and validates what it renders,
// naming the file and document of every bad input.
//
// It must not import kube clients, engine, inventory or status: it never talks to a cluster.
package sources
