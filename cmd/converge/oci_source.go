package main

import (
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/oci"
)

// ociFlags say how to read an oci:// argument of "converge build" and "converge apply".
type ociFlags struct {
	dockerConfig string
	caFile       string
	insecure     bool
	layerType    string
	layerCopy    bool
}

func (o *ociFlags) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&o.dockerConfig, "docker-config", "", "for an oci:// source: a Docker config file (a .dockerconfigjson, or ~/.docker/config.json with inline auths) holding the registry's credentials (default: anonymous)")
	fl.StringVar(&o.caFile, "ca-file", "", "for an oci:// source: PEM bundle trusted for the registry's certificate, besides the system roots")
	fl.BoolVar(&o.insecure, "insecure-registry", false, "for an oci:// source: speak plain HTTP to the registry")
	fl.StringVar(&o.layerType, "layer-media-type", "", "for an oci:// source: extract the first layer of this media type (default: the first layer)")
	fl.BoolVar(&o.layerCopy, "layer-copy", false, "for an oci:// source: write the layer as one file named by its title annotation instead of extracting it")
}

// isOCI reports whether a PATH argument names an OCI artifact.
func isOCI(arg string) bool { return strings.HasPrefix(arg, oci.Scheme) }

// ociSource turns an oci://host/repo[:tag|@digest] argument, --ref-semver or --ref
// semver:RANGE, and the OCI flags into what to load.
func (f *sourceFlags) ociSource(arg string) (sources.Source, error) {
	if f.gitURL != "" {
		return sources.Source{}, errors.New("give either an oci:// reference or --git-url, not both")
	}
	url, ref, err := oci.ParseURL(arg)
	if err != nil {
		return sources.Source{}, err
	}
	gref, err := f.ref.resolve()
	if err != nil {
		return sources.Source{}, err
	}
	switch {
	case gref.Branch != "" || gref.Commit != "":
		return sources.Source{}, fmt.Errorf("%s: an OCI artifact has tags and digests, not branches or commits: give oci://host/repo:TAG, @sha256:DIGEST or --ref-semver", arg)
	case gref.SemVer != "" && ref != (oci.Ref{}):
		return sources.Source{}, fmt.Errorf("%s: give a tag or digest in the reference, or --ref-semver, not both", arg)
	case gref.SemVer != "":
		ref.SemVer = gref.SemVer
	case gref.Tag != "" && ref == (oci.Ref{}):
		ref.Tag = gref.Tag
	}
	a := oci.Artifact{URL: url, Ref: ref, Insecure: f.oci.insecure, Layer: oci.LayerSelector{MediaType: f.oci.layerType}}
	if f.oci.layerCopy {
		a.Layer.Operation = oci.OperationCopy
	}
	if a.Auth, err = f.oci.auth(); err != nil {
		return sources.Source{}, err
	}
	return sources.Source{OCI: a, Path: f.path}, nil
}

// auth reads --docker-config and --ca-file.
func (o *ociFlags) auth() (oci.Auth, error) {
	var a oci.Auth
	var err error
	if o.dockerConfig != "" {
		if a.DockerConfigJSON, err = os.ReadFile(o.dockerConfig); err != nil {
			return a, fmt.Errorf("--docker-config: %w", err)
		}
	}
	if o.caFile != "" {
		if a.CA, err = os.ReadFile(o.caFile); err != nil {
			return a, fmt.Errorf("--ca-file: %w", err)
		}
	}
	return a, nil
}
