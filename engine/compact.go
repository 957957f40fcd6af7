package engine

import (
	"encoding/binary"
	"slices"
	"sync"
	"unique"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The watch cache holds the metadata of every managed object, most of which repeats from
// object to object: the labels (the cache's own label, the shard's) and the annotations (the
// owner annotation, alike for every object of one inventory) of one set are the same maps,
// and every object of a namespace names it, every object of a kind its API version and kind.
// A Go map of a few entries takes about 300 bytes, a string its own copy: at 100,000 objects
// the maps alone were about 60 MB of the cache. The cache's transform shares them: a map
// alike to one seen before is replaced by it, and these strings by one copy each
// (unique.Make). The cache's objects are read-only (cachedLive hands them out without a
// copy, and every reader only reads), so shared maps are never written.

// maxSharedMaps bounds the maps the table holds: past it the table starts again (the
// objects keep the maps they have; only later ones share anew). A set's objects share a
// handful: the owner annotation of 1,000 inventories and the cache's labels fit.
const maxSharedMaps = 4096

// maxSharedMapEntries and maxSharedMapBytes bound a map the table takes (its entries, and
// the bytes of its keys and values): the maps worth sharing are the cache's labels and the
// owner annotation, a few entries of tens of bytes. A larger one (a last-applied
// configuration, a tenant's 250 KiB annotation, hundreds of empty labels) is left to its
// object. A map so bounded takes at most about 2 KB in the table (its slots, its strings
// and its content as the table's key), so the one table of the process (metadataMaps,
// shared by every watch cache: one per shard a replica holds) holds under 10 MB, also when
// it keeps maps of objects that are gone.
const (
	maxSharedMapEntries = 16
	maxSharedMapBytes   = 512
)

// metadataMaps is the table every watch cache of the process shares its objects' maps
// through.
var metadataMaps = &sharedMaps{}

// sharedMaps is the table of maps the cache's objects share, by content.
type sharedMaps struct {
	mu   sync.Mutex
	maps map[string]map[string]string
	keys []string // scratch for the sorted keys of one map, under mu
	key  []byte   // scratch for the content of one map, under mu
}

// compact makes pm share its labels, annotations and common strings with the objects seen
// before it. Only an object the cache has not handed out yet may be given (the transform's
// first pass over it).
func (s *sharedMaps) compact(pm *metav1.PartialObjectMetadata) {
	pm.APIVersion, pm.Kind = intern(pm.APIVersion), intern(pm.Kind)
	pm.Namespace, pm.GenerateName = intern(pm.Namespace), intern(pm.GenerateName)
	s.mu.Lock()
	defer s.mu.Unlock()
	pm.Labels = s.share(pm.Labels)
	pm.Annotations = s.share(pm.Annotations)
}

// share returns the map seen before with m's entries, or m, now shared.
func (s *sharedMaps) share(m map[string]string) map[string]string {
	if len(m) == 0 || len(m) > maxSharedMapEntries {
		return m
	}
	size := 0
	for k, v := range m {
		if size += len(k) + len(v); size > maxSharedMapBytes {
			return m
		}
	}
	s.keys = s.keys[:0]
	for k := range m {
		s.keys = append(s.keys, k)
	}
	slices.Sort(s.keys)
	// Each key and value with its length first: a value may hold any byte (an annotation's
	// NUL), and two maps must never read as one.
	s.key = s.key[:0]
	for _, k := range s.keys {
		v := m[k]
		s.key = append(binary.AppendUvarint(s.key, uint64(len(k))), k...)
		s.key = append(binary.AppendUvarint(s.key, uint64(len(v))), v...)
	}
	if seen, ok := s.maps[string(s.key)]; ok { // no string made to look it up
		return seen
	}
	if s.maps == nil || len(s.maps) >= maxSharedMaps {
		s.maps = make(map[string]map[string]string)
	}
	s.maps[string(s.key)] = m
	return m
}

// intern is the one copy of str that unique holds (a string no longer used anywhere is
// dropped from it).
func intern(str string) string {
	if str == "" {
		return ""
	}
	return unique.Make(str).Value()
}
