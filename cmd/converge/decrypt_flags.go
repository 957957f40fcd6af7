package main

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/pipeline"
	"github.com/converge-dev/converge/sources/sops"
)

// decryptionFlags decrypt the SOPS-encrypted objects of a render in memory with local age
// identity files, as a Sync's spec.decryption does with its key Secret. SOPS_AGE_KEY_FILE
// and ~/.config/sops/age are not read: a key is used only when named, so what a command
// decrypts does not depend on the shell it runs in.
type decryptionFlags struct {
	keyFiles []string
	// build: print, do not apply. Without a key an encrypted object is printed masked, as
	// "flux build kustomization" does, instead of refused.
	build       bool
	showSecrets bool
	// rendered is the render before decryption: which values were encrypted, for mask.
	rendered *sources.Bundle
	// decrypted is the render decrypted with the key files, for withholdDiffs.
	decrypted *sources.Bundle
	stderr    io.Writer // build's, for the note that values are masked
}

// addFlags registers --decryption-key-file on cmd, and --show-secrets for build.
func (d *decryptionFlags) addFlags(cmd *cobra.Command) {
	cmd.Flags().StringArrayVar(&d.keyFiles, "decryption-key-file", nil,
		"age identity file (AGE-SECRET-KEY-1... lines) to decrypt SOPS-encrypted objects with; repeatable")
	if d.build {
		cmd.Flags().BoolVar(&d.showSecrets, "show-secrets", false,
			"print the decrypted values of SOPS-encrypted objects instead of "+sops.Mask)
	}
}

// decryption is how the pipeline decrypts: with the keys of the key files, read now (a
// file that cannot be read is an error even when nothing is encrypted). Without a key file
// an encrypted object is refused, except by build, which prints it masked.
func (d *decryptionFlags) decryption() (pipeline.Decryption, error) {
	if len(d.keyFiles) == 0 {
		return pipeline.Decryption{KeepEncrypted: d.build, Hints: pipeline.Hints{NoKeys: "give the age identity with --decryption-key-file FILE"}}, nil
	}
	keys := &sops.Keys{}
	for _, f := range d.keyFiles {
		data, err := os.ReadFile(f)
		if err != nil {
			return pipeline.Decryption{}, fmt.Errorf("--decryption-key-file: %w", err)
		}
		if err := keys.AddAge(f, data); err != nil {
			return pipeline.Decryption{}, fmt.Errorf("--decryption-key-file: %w", err)
		}
	}
	return pipeline.Decryption{
		Keys:  func(context.Context) (*sops.Keys, error) { return keys, nil },
		Hints: pipeline.Hints{WrongKey: "give the age identity of a listed recipient with --decryption-key-file"},
	}, nil
}

// prepared records what the pipeline made of the render, for mask and withholdDiffs.
func (d *decryptionFlags) prepared(res pipeline.Result) {
	d.rendered = res.Rendered
	if len(d.keyFiles) > 0 {
		d.decrypted = res.Decrypted
	}
}

// mask returns b for printing: the values that were encrypted replaced by sops.Mask,
// unless --show-secrets.
func (d *decryptionFlags) mask(b *sources.Bundle) *sources.Bundle {
	if d.showSecrets || d.rendered == nil {
		return b
	}
	m := sops.MaskValues(b, d.rendered)
	if m != b && len(d.keyFiles) == 0 && d.stderr != nil {
		fmt.Fprintf(d.stderr, "SOPS-encrypted values are printed as %s; give --decryption-key-file to decrypt (and check) them\n", sops.Mask)
	}
	return m
}

// withholdDiffs drops the diff of every decrypted object that is not a Secret: the engine
// masks Secret values only, and the live side of such a diff holds the applied plaintext,
// which redact cannot know. applied is the bundle that was applied (after substitution,
// which keeps the objects' order): an object is found by its position, under the name it
// was applied with, which a substitution may have changed.
func (d *decryptionFlags) withholdDiffs(r *report, applied *sources.Bundle) {
	if d.decrypted == nil || d.rendered == nil || applied == nil {
		return
	}
	type key struct{ kind, ns, name string }
	held := map[key]bool{}
	for i, o := range d.rendered.Objects {
		if i < len(applied.Objects) && sops.Encrypted(o) && (o.GetKind() != "Secret" || o.GroupVersionKind().Group != "") {
			a := applied.Objects[i]
			held[key{a.GetKind(), a.GetNamespace(), a.GetName()}] = true
		}
	}
	for i, o := range r.Objects {
		// An object rendered without a namespace is reported in the one it was applied to.
		if o.Diff != "" && (held[key{o.Kind, o.Namespace, o.Name}] || held[key{o.Kind, "", o.Name}]) {
			r.Objects[i].Diff = "# diff withheld: the object holds values decrypted with SOPS\n"
		}
	}
}
