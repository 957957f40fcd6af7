package git

import (
	"fmt"
	"strings"

	"github.com/Masterminds/semver/v3"
	"github.com/go-git/go-git/v5/plumbing"
)

// target is a resolved ref: the remote ref to fetch and the commit it points to.
type target struct {
	// name prefixes the revision ("main", "v1.2.3"); empty for a bare commit.
	name string
	// refName is the remote ref to fetch; empty for a bare commit.
	refName plumbing.ReferenceName
	// hash is the commit (tags are peeled).
	hash plumbing.Hash
	// tag is the annotated tag object refName points to; zero for a branch, a lightweight
	// tag or a bare commit.
	tag plumbing.Hash
}

// revision formats the revision string of a checkout of t.
func (t target) revision() string {
	if t.name == "" {
		return "sha1:" + t.hash.String()
	}
	return t.name + "@sha1:" + t.hash.String()
}

// advertised indexes a ref advertisement; peeled maps annotated tags to their commits.
type advertised struct {
	refs   map[plumbing.ReferenceName]*plumbing.Reference
	peeled map[plumbing.ReferenceName]plumbing.Hash
}

func index(refs []*plumbing.Reference) advertised {
	a := advertised{
		refs:   make(map[plumbing.ReferenceName]*plumbing.Reference, len(refs)),
		peeled: map[plumbing.ReferenceName]plumbing.Hash{},
	}
	for _, r := range refs {
		if name, ok := strings.CutSuffix(r.Name().String(), "^{}"); ok {
			a.peeled[plumbing.ReferenceName(name)] = r.Hash()
			continue
		}
		a.refs[r.Name()] = r
	}
	return a
}

// commitOf returns the commit a tag or branch ref points to, peeling annotated tags.
func (a advertised) commitOf(name plumbing.ReferenceName) (plumbing.Hash, bool) {
	if h, ok := a.peeled[name]; ok {
		return h, true
	}
	r, ok := a.refs[name]
	if !ok || r.Type() != plumbing.HashReference {
		return plumbing.ZeroHash, false
	}
	return r.Hash(), true
}

// pick resolves a non-commit Ref against the advertisement.
func (a advertised) pick(ref Ref) (target, error) {
	switch {
	case ref.SemVer != "":
		return a.pickSemVer(ref.SemVer)
	case ref.Tag != "":
		name := plumbing.NewTagReferenceName(ref.Tag)
		h, ok := a.commitOf(name)
		if !ok {
			return target{}, fmt.Errorf("tag %q: %w", ref.Tag, ErrRefNotFound)
		}
		return target{name: ref.Tag, refName: name, hash: h, tag: a.tagObject(name)}, nil
	case ref.Branch != "":
		return a.branch(ref.Branch)
	}
	head, ok := a.refs[plumbing.HEAD]
	if !ok || head.Type() != plumbing.SymbolicReference || !head.Target().IsBranch() {
		return target{}, fmt.Errorf("default branch: remote HEAD is not advertised as a branch, set a branch: %w", ErrRefNotFound)
	}
	return a.branch(head.Target().Short())
}

// tagObject returns the annotated tag object a tag ref points to (one the remote peels), or
// the zero hash for a lightweight tag.
func (a advertised) tagObject(name plumbing.ReferenceName) plumbing.Hash {
	r, ok := a.refs[name]
	if _, peeled := a.peeled[name]; !ok || !peeled {
		return plumbing.ZeroHash
	}
	return r.Hash()
}

func (a advertised) branch(branch string) (target, error) {
	name := plumbing.NewBranchReferenceName(branch)
	h, ok := a.commitOf(name)
	if !ok {
		return target{}, fmt.Errorf("branch %q: %w", branch, ErrRefNotFound)
	}
	return target{name: branch, refName: name, hash: h}, nil
}

// pickSemVer returns the highest tag matching the constraint. Tags that are not semantic
// versions are ignored; pre-releases match only constraints that name a pre-release.
func (a advertised) pickSemVer(constraint string) (target, error) {
	c, err := semver.NewConstraint(constraint)
	if err != nil {
		return target{}, fmt.Errorf("semver %q: invalid constraint: %w", constraint, err)
	}
	var best *semver.Version
	var bestName plumbing.ReferenceName
	for name := range a.refs {
		if !name.IsTag() {
			continue
		}
		v, err := semver.NewVersion(name.Short())
		if err != nil || !c.Check(v) {
			continue
		}
		// Equal versions ("1.0.0" and "v1.0.0"): the lexically smaller tag wins, for determinism.
		if best == nil || v.GreaterThan(best) || (v.Equal(best) && name < bestName) {
			best, bestName = v, name
		}
	}
	if best == nil {
		return target{}, fmt.Errorf("semver %q: no matching tag: %w", constraint, ErrRefNotFound)
	}
	h, _ := a.commitOf(bestName)
	return target{name: bestName.Short(), refName: bestName, hash: h, tag: a.tagObject(bestName)}, nil
}
