package helmrepo

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strings"

	"sigs.k8s.io/yaml"
)

// An index is read as it streams in, never held whole: decoding YAML takes about twenty
// times its size in memory (386 MB allocated for a 16 MiB index), and an index may have
// tens of megabytes. In the layout `helm repo index` writes (top-level keys at column 0, each
// chart's name at column 2 under "entries:", its versions a list of items at column 2 below
// it), only the asked chart's part is kept, at most maxPart bytes, and each of its versions
// is decoded on its own, at most maxItem bytes. An index in another layout (JSON, another
// indentation) is kept and decoded whole up to maxWhole bytes only.
const (
	maxPart  = 8 << 20
	maxItem  = 256 << 10
	maxWhole = 1 << 20
)

// cut is what readIndex kept of an index.
type cut struct {
	apiVersion bool
	entries    bool
	// items are the chart's versions as written, one YAML document each.
	items [][]byte
	// keys counts the chart's keys under entries: more than one is refused, since a cut
	// could then disagree with a whole decode.
	keys int
	// whole is the index as read while it is at most maxWhole bytes; nil past it.
	whole []byte
}

// readIndex reads an index from r (at most limit bytes; 0: no limit) and returns the
// versions of chart name: the helm layout's cut when the index has it, else a whole decode
// when the index is small enough.
func readIndex(c Chart, r io.Reader, limit int64) ([]chartVersion, error) {
	if limit > 0 {
		r = io.LimitReader(r, limit+1)
	}
	counted := &countingReader{r: r}
	ct, err := cutIndex(bufio.NewReaderSize(counted, 64<<10), c.Name)
	n := counted.n
	if err != nil {
		return nil, fmt.Errorf("%s: index.yaml: %w", c, err)
	}
	if limit > 0 && n > limit {
		return nil, fmt.Errorf("%s: index.yaml: %w: more than %d bytes (--max-index-size)", c, ErrTooLarge, limit)
	}
	switch {
	case ct.entries && ct.apiVersion:
		return decodeItems(c, ct)
	case ct.whole == nil:
		return nil, fmt.Errorf("%s: index.yaml: %w: %d bytes not in the layout helm repo index writes; such an index is read up to %d bytes",
			c, ErrTooLarge, n, maxWhole)
	}
	var idx index
	if err := yaml.Unmarshal(ct.whole, &idx); err != nil {
		return nil, fmt.Errorf("%s: index.yaml: %w: %v", c, ErrInvalid, err)
	}
	if idx.APIVersion == "" {
		return nil, fmt.Errorf("%s: index.yaml: %w: no apiVersion (is this a Helm repository?)", c, ErrInvalid)
	}
	return idx.Entries[c.Name], nil
}

// decodeItems decodes the chart's versions one by one.
func decodeItems(c Chart, ct *cut) ([]chartVersion, error) {
	if ct.keys > 1 {
		return nil, fmt.Errorf("%s: index.yaml: %w: chart %q is listed %d times under entries", c, ErrInvalid, c.Name, ct.keys)
	}
	out := make([]chartVersion, 0, len(ct.items))
	for i, item := range ct.items {
		var list []chartVersion
		if err := yaml.Unmarshal(item, &list); err != nil || len(list) != 1 {
			return nil, fmt.Errorf("%s: index.yaml: %w: version %d of chart %q does not decode: %v", c, ErrInvalid, i+1, c.Name, err)
		}
		out = append(out, list[0])
	}
	return out, nil
}

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// cutIndex scans the index line by line and returns what it kept.
func cutIndex(r *bufio.Reader, name string) (*cut, error) {
	ct := &cut{whole: []byte{}}
	var part int64
	inEntries, inChart := false, false
	for {
		line, err := readLine(r)
		if ct.whole != nil {
			if len(ct.whole)+len(line) > maxWhole {
				ct.whole = nil
			} else {
				ct.whole = append(ct.whole, line...)
			}
		}
		if len(line) > 0 {
			text := bytes.TrimRight(line, "\r\n")
			inEntries, inChart = ct.scan(text, name, inEntries, inChart)
			if inChart && bytes.HasPrefix(text, []byte("  ")) && !isKey(text) {
				if part += int64(len(line)); part > maxPart {
					return nil, fmt.Errorf("%w: the versions of chart %q pass %d bytes", ErrTooLarge, name, maxPart)
				}
				if err := ct.addLine(text); err != nil {
					return nil, err
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return ct, nil
		}
		if err != nil {
			return nil, err
		}
	}
}

// scan follows the layout: a top-level key ends entries, a key at column 2 under entries
// starts or ends the chart's part.
func (ct *cut) scan(text []byte, name string, inEntries, inChart bool) (bool, bool) {
	trimmed := bytes.TrimSpace(text)
	switch {
	case len(trimmed) == 0 || trimmed[0] == '#':
		return inEntries, inChart
	case text[0] != ' ':
		ct.apiVersion = ct.apiVersion || bytes.HasPrefix(text, []byte("apiVersion:"))
		if string(text) == "entries:" {
			ct.entries = true
			return true, false
		}
		return false, false
	case inEntries && isKey(text):
		key := strings.Trim(string(bytes.TrimSuffix(trimmed, []byte(":"))), `"'`)
		if key == name {
			ct.keys++
			return true, true
		}
		return true, false
	}
	return inEntries, inChart
}

// isKey reports whether text is a mapping key at column 2 ("  name:").
func isKey(text []byte) bool {
	return len(text) > 2 && text[0] == ' ' && text[1] == ' ' && text[2] != ' ' && text[2] != '-' && text[len(text)-1] == ':'
}

// addLine adds a line of the chart's part: "  - " starts a version, deeper lines continue it.
func (ct *cut) addLine(text []byte) error {
	if bytes.HasPrefix(text, []byte("  - ")) || string(text) == "  -" {
		ct.items = append(ct.items, nil)
	}
	if len(ct.items) == 0 {
		return fmt.Errorf("%w: a line of the chart's versions before the first one: %q", ErrInvalid, truncate(string(text)))
	}
	last := &ct.items[len(ct.items)-1]
	if len(*last)+len(text) > maxItem {
		return fmt.Errorf("%w: one version of the chart passes %d bytes", ErrTooLarge, maxItem)
	}
	*last = append(append(*last, text[2:]...), '\n')
	return nil
}

// readLine reads one line, at most about maxPart bytes of it (the rest of a longer line is
// read and dropped; readIndex counts every byte read).
func readLine(r *bufio.Reader) ([]byte, error) {
	chunk, err := r.ReadSlice('\n')
	if !errors.Is(err, bufio.ErrBufferFull) {
		return chunk, err // valid until the next read: the caller copies what it keeps
	}
	line := append([]byte(nil), chunk...)
	for errors.Is(err, bufio.ErrBufferFull) {
		chunk, err = r.ReadSlice('\n')
		if len(line) <= maxPart {
			line = append(line, chunk...)
		}
	}
	return line, err
}

func truncate(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
