package status

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"

	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/converge-dev/converge/status/v1alpha1"
)

// The recovery copy of the inventory is most of a Sync's bytes (about 140 bytes an object),
// and a daemon's informer cache holds every Sync it watches, on every replica: 14 MB for
// 1,000 Syncs of 100 objects. The cache keeps a digest of each copy instead
// (CompactInventory). The writer compares an outcome's copy with that digest, and sends the
// copy only when it differs; a reader that needs the entries reads the Sync from the API
// server (Compacted says when).

// CompactInventory is a cache transform: it replaces the recovery copy in a Sync's status
// with its digest (InventoryStatus.Digest). Any other object is returned as it is. It may
// be given an object it already compacted.
func CompactInventory(obj any) (any, error) {
	s, ok := obj.(*v1alpha1.Sync)
	if !ok {
		return obj, nil
	}
	if inv := s.Status.Inventory; inv != nil && len(inv.Objects) > 0 {
		inv.Digest, inv.Objects = InventoryDigest(inv.Objects), nil
	}
	return obj, nil
}

// Compacted reports whether s's status holds the digest of its recovery copy, not the copy:
// s was read from a cache that CompactInventory transforms. An object that holds both (an
// API server's answer decoded into a cached object) holds the copy, and is not compacted.
func Compacted(s *v1alpha1.Sync) bool {
	return compacted(s.Status.Inventory)
}

// compacted reports whether inv holds the digest of its recovery copy, not the copy.
func compacted(inv *v1alpha1.InventoryStatus) bool {
	return inv != nil && inv.Digest != "" && len(inv.Objects) == 0
}

// InventoryDigest is the digest of a recovery copy (InventoryStatus.Digest once compacted);
// "" for an empty one, which is never compacted. Every ID and UID is written after its
// length, and the count first: the status is anyone's with status rights to write, and no
// other copy may write the same bytes.
func InventoryDigest(objects []v1alpha1.InventoryObject) string {
	if len(objects) == 0 {
		return ""
	}
	h := sha256.New()
	var n [binary.MaxVarintLen64]byte
	write := func(v int) { h.Write(n[:binary.PutUvarint(n[:], uint64(v))]) }
	write(len(objects))
	for _, o := range objects {
		write(len(o.ID))
		h.Write([]byte(o.ID))
		write(len(o.UID))
		h.Write([]byte(o.UID))
	}
	return hex.EncodeToString(h.Sum(nil))
}

// sameInventory reports whether next says what cur, a compacted record, says: the same
// recovery copy and every other field alike. It is false for a record that is not
// compacted, which the writer compares in full.
func sameInventory(cur, next *v1alpha1.InventoryStatus) bool {
	if !compacted(cur) || next == nil || cur.Digest != InventoryDigest(next.Objects) {
		return false
	}
	n := *next
	n.Objects, n.Digest = nil, cur.Digest
	return equality.Semantic.DeepEqual(*cur, n)
}
