package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strings"

	"github.com/spf13/cobra"

	"github.com/converge-dev/converge/sources"
	"github.com/converge-dev/converge/sources/helmrepo"
	"github.com/converge-dev/converge/sources/oci"
)

// chartFlags name a chart of a Helm repository, as helm template does: CHART --repo URL,
// or oci://host/path/CHART, with --version.
type chartFlags struct {
	repo            string
	version         string
	passCredentials bool
}

func (c *chartFlags) addFlags(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.StringVar(&c.repo, "repo", "", "Helm chart repository of the CHART argument: https://… (index.yaml) or oci://host/path; credentials from CONVERGE_HELM_USERNAME and CONVERGE_HELM_PASSWORD (or --docker-config for oci://), a custom CA from --ca-file")
	fl.StringVar(&c.version, "version", "", "chart version or semver constraint (default: the highest without a prerelease); with an oci:// PATH it names a chart, as helm template oci://… --version does")
	fl.BoolVar(&c.passCredentials, "pass-credentials", false, "send the repository's credentials to chart URLs on other hosts too")
}

// asked reports whether the flags and arguments name a chart of a repository.
func (c *chartFlags) asked(args []string) bool {
	return c.repo != "" || (len(args) == 1 && isOCI(args[0]) && c.version != "")
}

// chartSource turns CHART --repo URL, or oci://host/path/CHART --version, into what to
// load.
func (f *sourceFlags) chartSource(args []string) (sources.Source, error) {
	c := f.chart
	switch {
	case f.gitURL != "":
		return sources.Source{}, errors.New("give either a chart (--repo, or oci:// with --version) or --git-url, not both")
	case len(args) != 1:
		return sources.Source{}, errors.New("give the chart's name as the argument: converge build CHART --repo URL [--version V]")
	case f.path != ".":
		return sources.Source{}, errors.New("--path does not apply to a chart of a repository: the chart is rendered whole")
	}
	repo, name := c.repo, args[0]
	if repo == "" { // oci://host/path/CHART
		i := strings.LastIndex(args[0], "/")
		repo, name = args[0][:i], args[0][i+1:]
	} else if isOCI(name) {
		return sources.Source{}, fmt.Errorf("%s: give either --repo and a chart name, or an oci:// chart reference with --version", name)
	}
	user, pass := os.Getenv("CONVERGE_HELM_USERNAME"), os.Getenv("CONVERGE_HELM_PASSWORD")
	auth, err := f.oci.auth()
	if err != nil {
		return sources.Source{}, err
	}
	if !sources.IsOCIRepository(repo) {
		return sources.Source{Chart: helmrepo.Chart{Repository: repo, Name: name, Version: c.version,
			Auth: helmrepo.Auth{Username: user, Password: pass, CA: auth.CA, PassCredentials: c.passCredentials}}}, nil
	}
	a := sources.OCIChart(repo, name, c.version)
	a.Insecure = f.oci.insecure
	a.Auth = auth
	a.Auth.Username, a.Auth.Password = user, pass
	a.Verify, err = f.verify.ociVerification()
	return sources.Source{OCI: a, Path: sources.ChartPath}, err
}

// chartName is the name of the chart src names in a repository, "" for another source.
func chartName(src sources.Source) string {
	switch {
	case src.Chart.Name != "":
		return src.Chart.Name
	case src.OCI.Layer.MediaType == oci.HelmChartMediaType:
		return path.Base(src.OCI.URL)
	}
	return ""
}
