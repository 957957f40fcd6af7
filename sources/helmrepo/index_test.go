package helmrepo

import (
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
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

// TestReadIndexMatchesTheWholeIndex: the versions cut out for one chart are those the
// whole index lists for it, for the first, a middle and the last chart, and none for a
// chart the index does not list.
func TestReadIndexMatchesTheWholeIndex(t *testing.T) {
	data := helmIndex(5, 3, 10)
	var whole index
	if err := yaml.Unmarshal([]byte(data), &whole); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"chart0", "chart2", "chart4", "absent"} {
		got, err := readIndex(Chart{Name: name}, strings.NewReader(data), 0)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(whole.Entries[name], got, cmpopts.EquateEmpty()); diff != "" {
			t.Errorf("%s (-whole +cut):\n%s", name, diff)
		}
	}
}

// heapPeak returns the most heap in use above what it was before, sampled while f runs.
func heapPeak(f func()) uint64 {
	runtime.GC()
	var base runtime.MemStats
	runtime.ReadMemStats(&base)
	stop, peak := make(chan struct{}), make(chan uint64)
	go func() {
		var m runtime.MemStats
		var p uint64
		for {
			runtime.ReadMemStats(&m)
			p = max(p, m.HeapInuse)
			select {
			case <-stop:
				peak <- p
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	}()
	f()
	close(stop)
	return max(<-peak, base.HeapInuse) - base.HeapInuse
}

// TestReadIndexBoundsMemory: a large index in helm's layout is read as it streams, its
// chart's versions decoded one by one: the heap stays within a render slot's budget (it
// took 229 MB above the start for a 45 MB index decoded whole); a chart whose versions pass
// maxPart and an index in another layout past maxWhole are refused.
func TestReadIndexBoundsMemory(t *testing.T) {
	big := helmIndex(400, 50, 1000) // about 22 MB
	var versions []chartVersion
	var err error
	peak := heapPeak(func() { versions, err = readIndex(Chart{Name: "chart399"}, strings.NewReader(big), 0) })
	if err != nil || len(versions) != 50 {
		t.Fatalf("%d versions, %v", len(versions), err)
	}
	if peak > 32<<20 {
		t.Errorf("reading a %d MB index took %d MB of heap", len(big)>>20, peak>>20)
	}
	base, _ := url.Parse("https://charts.example.com/")
	r, err := resolve(versions, Chart{Name: "chart399"}, base)
	if err != nil || r.version != "1.49.0" || r.url.String() != "https://charts.example.com/chart399-1.49.0.tgz" {
		t.Errorf("resolved %+v, %v", r, err)
	}
	if _, err := readIndex(Chart{Name: "chart0"}, strings.NewReader(helmIndex(1, 9000, 1000)), 0); !errors.Is(err, ErrTooLarge) {
		t.Errorf("a chart of 9,000 versions: %v, want ErrTooLarge", err)
	}
	js, err := yaml.YAMLToJSON([]byte(helmIndex(20, 50, 1000)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := readIndex(Chart{Name: "chart1"}, bytes.NewReader(js), 0); !errors.Is(err, ErrTooLarge) {
		t.Errorf("JSON index of %d bytes: %v, want ErrTooLarge", len(js), err)
	}
	small, _ := yaml.YAMLToJSON([]byte(helmIndex(2, 2, 10)))
	if v, err := readIndex(Chart{Name: "chart1"}, bytes.NewReader(small), 0); err != nil || len(v) != 2 {
		t.Errorf("small JSON index: %d versions, %v", len(v), err)
	}
	if _, err := readIndex(Chart{Name: "chart1"}, strings.NewReader(big), 1<<20); !errors.Is(err, ErrTooLarge) {
		t.Errorf("index over the limit: %v, want ErrTooLarge", err)
	}
}

// TestReadIndexRefusesAmbiguousCut: a "  app:" line inside another chart's quoted text is a
// chart key to a line cut and text to YAML: with the real chart listed too, the index is
// refused rather than read as the cut would (without it: version 9.9.9 from another
// host was chosen where helm sees 1.0.0).
func TestReadIndexRefusesAmbiguousCut(t *testing.T) {
	data := "apiVersion: v1\nentries:\n  app:\n  - version: 1.0.0\n    urls: [app-1.0.0.tgz]\n  other:\n  - version: 1.0.0\n" +
		"    urls: [other.tgz]\n    description: \"harmless\n  app:\n  - version: 9.9.9\n    urls: [http://elsewhere.example/evil.tgz]\n    x: y\"\n"
	if v, err := readIndex(Chart{Name: "app"}, strings.NewReader(data), 0); !errors.Is(err, ErrInvalid) {
		t.Errorf("read %+v, %v; want ErrInvalid", v, err)
	}
}
