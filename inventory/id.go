package inventory

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

// Owner is the kind of owner an inventory belongs to. Every kind has its own ID namespace,
// so a Sync apps/prod, "converge apply --inventory apps/prod" and "converge install" never
// share an inventory ID, and none of them can see the others' objects as its own (I11).
type Owner string

// The owners of inventories.
const (
	// OwnerSync is a Sync of the daemon; the name is the Sync's namespace and name.
	OwnerSync Owner = "sync"
	// OwnerCLI is "converge apply --inventory NAMESPACE/NAME"; the name is the ConfigMap's.
	OwnerCLI Owner = "cli"
	// OwnerInstall is "converge install"; the name is its inventory ConfigMap's.
	OwnerInstall Owner = "install"
)

// maxID is the longest label value: an ID is stored as the value of IDLabel.
const maxID = 63

// ID returns the inventory ID of owner's set namespace/name: owner_namespace_name, for
// example sync_apps_prod. Namespaces and names never contain "_", so the parts can be read
// back (Describe), and no ID has the one "_" of a legacy ID (LegacyID). An ID that would
// exceed 63 characters (a label value) becomes owner__<prefix>.<hash>: the "__" never
// occurs in an unhashed ID, the hash of owner/namespace/name keeps it unique.
func ID(owner Owner, namespace, name string) string {
	id := string(owner) + "_" + namespace + "_" + name
	if len(id) <= maxID {
		return id
	}
	sum := sha256.Sum256([]byte(string(owner) + "/" + namespace + "/" + name))
	hash := hex.EncodeToString(sum[:])[:16]
	room := maxID - len(owner) - len("__") - len(".") - len(hash)
	prefix := namespace + "." + name
	prefix = strings.TrimRight(prefix[:min(room, len(prefix))], ".-")
	return string(owner) + "__" + prefix + "." + hash
}

// LegacyID is the ID Converge gave inventories before IDs named their owner: namespace_name
// for a Sync, for "converge apply --inventory" and for "converge install" alike, which let
// those three share one inventory. Beyond 63 characters it was cut to 46 and followed by
// "-" and 16 hex digits of its SHA-256. Store.Migrate takes such inventories over; both are
// removed in v0.2.
func LegacyID(namespace, name string) string {
	id := namespace + "_" + name
	if len(id) > maxID {
		sum := sha256.Sum256([]byte(id))
		id = id[:46] + "-" + hex.EncodeToString(sum[:])[:16]
	}
	return id
}

// Describe names the owner of the inventory id in words a person can act on: "Sync
// apps/prod", "converge apply --inventory apps/prod", "converge install". An ID it cannot
// read (a legacy ID, another tool's) is quoted as it is.
func Describe(id string) string {
	owner, rest, ok := strings.Cut(id, "_")
	if !ok {
		return quoteID(id)
	}
	if strings.HasPrefix(rest, "_") { // hashed: the names are not all there
		switch Owner(owner) {
		case OwnerSync:
			return "a Sync (inventory " + id + ")"
		case OwnerCLI:
			return "converge apply --inventory (inventory " + id + ")"
		case OwnerInstall:
			return "converge install"
		}
		return quoteID(id)
	}
	ns, name, ok := strings.Cut(rest, "_")
	if !ok {
		// The legacy namespace_name: a Sync or a "converge apply --inventory" of an
		// earlier version, until its owner applies again.
		if owner != "" && rest != "" {
			return quoteID(id) + " (written by an earlier version for Sync " + owner + "/" + rest +
				" or converge apply --inventory " + owner + "/" + rest + ")"
		}
		return quoteID(id)
	}
	if ns == "" || name == "" || strings.Contains(name, "_") {
		return quoteID(id)
	}
	switch Owner(owner) {
	case OwnerSync:
		return "Sync " + ns + "/" + name
	case OwnerCLI:
		return "converge apply --inventory " + ns + "/" + name
	case OwnerInstall:
		return "converge install"
	}
	return quoteID(id)
}

// quoteID names an inventory known only by its ID.
func quoteID(id string) string { return `inventory "` + id + `"` }
