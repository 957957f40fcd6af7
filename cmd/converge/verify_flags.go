package main

import (
	"errors"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/sources/git"
	"github.com/converge-dev/converge/sources/oci"
)

// verifyFlags ask a git or OCI fetch to verify signatures, as spec.source.git.verify and
// spec.source.oci.verify do in the daemon: the same check, with keys read from files instead of a Secret.
type verifyFlags struct {
	keyFiles []string
	mode     string
}

func (v *verifyFlags) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringArrayVar(&v.keyFiles, "verify-key", nil, "trusted public key file, repeatable: an armored PGP public key block or SSH "+
		"authorized_keys lines; with --git-url, the commit (or tag, see --verify-mode) must be signed by one of them; for an oci:// "+
		"source, a cosign public key (cosign.pub): the artifact must carry a cosign signature by one of them")
	fl.StringVar(&v.mode, "verify-mode", string(git.VerifyHEAD), "with --verify-key: HEAD (the commit), Tag (the annotated tag of "+
		"--ref-tag or --ref-semver) or TagAndHEAD")
}

// verification reads the key files; nil without --verify-key. gitURL is --git-url: keys
// verify a fetched commit, never a local folder.
func (v *verifyFlags) verification(gitURL string) (*git.Verification, error) {
	if len(v.keyFiles) == 0 {
		if v.mode != "" && v.mode != string(git.VerifyHEAD) {
			return nil, errors.New("--verify-mode needs --verify-key")
		}
		return nil, nil
	}
	if gitURL == "" {
		return nil, errors.New("--verify-key verifies a fetched commit or OCI artifact: give --git-url or an oci:// reference")
	}
	keys, err := v.keys()
	if err != nil {
		return nil, err
	}
	return &git.Verification{Mode: git.VerifyMode(v.mode), Keys: keys}, nil
}

// ociVerification reads the key files as cosign public keys for an oci:// source; nil
// without --verify-key.
func (v *verifyFlags) ociVerification() (*oci.Verification, error) {
	if v.mode != string(git.VerifyHEAD) {
		return nil, errors.New("--verify-mode is for a git source: an OCI artifact's cosign signature is verified with --verify-key alone")
	}
	if len(v.keyFiles) == 0 {
		return nil, nil
	}
	keys, err := v.keys()
	if err != nil {
		return nil, err
	}
	return &oci.Verification{Provider: oci.CosignProvider, Keys: keys}, nil
}

// keys reads the --verify-key files, by path.
func (v *verifyFlags) keys() (map[string][]byte, error) {
	keys := make(map[string][]byte, len(v.keyFiles))
	for _, p := range v.keyFiles {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("--verify-key: %w", err)
		}
		keys[p] = b
	}
	return keys, nil
}
