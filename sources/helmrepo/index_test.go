package helmrepo

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"sigs.k8s.io/yaml"
)

// helmIndex writes an index in the layout `helm repo index` writes, of charts × versions,
// each entry padded to about pad bytes.
func helmIndex(charts, versions, pad int) string {
	var b strings.Builder
	b.WriteString("apiVersion: v1\nentries:\n")
	for c := range charts {
		fmt.Fprintf(&b, "  chart%d:\n", c)
		for v := range versions {
			fmt.Fprintf(&b, "  - apiVersion: v2\n    description: |\n      %s\n    digest: \"%064x\"\n    name: chart%d\n    urls:\n    - chart%d-1.%d.0.tgz\n    version: 1.%d.0\n",
				strings.Repeat("d", pad), c*1000+v, c, c, v, v)
		}
	}
	b.WriteString("generated: \"2026-11-27T00:00:00Z\"\n")
	return b.String()
}

// TestChartEntriesMatchesTheWholeIndex: the versions cut out for one chart are those the
// whole index lists for it, for the first, a middle and the last chart, and none for a
// chart the index does not list.
func TestChartEntriesMatchesTheWholeIndex(t *testing.T) {
	data := []byte(helmIndex(5, 3, 10))
	var whole index
	if err := yaml.Unmarshal(data, &whole); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"chart0", "chart2", "chart4", "absent"} {
		idx, err := parseIndex("r", name, data)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(whole.Entries[name], idx.Entries[name]); diff != "" {
			t.Errorf("%s (-whole +cut):\n%s", name, diff)
		}
		if len(idx.Entries) > 1 {
			t.Errorf("%s: cut index lists %d charts, want at most 1", name, len(idx.Entries))
		}
	}
}

// TestParseIndexBoundsMemory: an index in helm's layout larger than a whole parse may
// take is read by its chart's part; one in another layout (JSON) over it is refused.
func TestParseIndexBoundsMemory(t *testing.T) {
	big := helmIndex(200, 50, 1000) // about 11 MB
	if len(big) <= maxFullParse {
		t.Fatalf("index of %d bytes, want more than %d", len(big), maxFullParse)
	}
	idx, err := parseIndex("r", "chart199", []byte(big))
	if err != nil {
		t.Fatal(err)
	}
	base, _ := url.Parse("https://charts.example.com/")
	r, err := resolve(idx, Chart{Name: "chart199"}, base)
	if err != nil || r.version != "1.49.0" || r.url.String() != "https://charts.example.com/chart199-1.49.0.tgz" {
		t.Errorf("resolved %+v, %v", r, err)
	}
	js, err := yaml.YAMLToJSON([]byte(big))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := parseIndex("r", "chart1", js); !errors.Is(err, ErrTooLarge) {
		t.Errorf("JSON index of %d bytes: %v, want ErrTooLarge", len(js), err)
	}
}
