package sources

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"sigs.k8s.io/yaml"
)

// location is where an object came from, for error messages.
type location struct {
	file            string
	line, doc, docs int
}

func (l location) errorf(object string, format string, args ...any) *InputError {
	return l.wrap(object, fmt.Errorf(format, args...))
}

func (l location) wrap(object string, err error) *InputError {
	return &InputError{File: l.file, Line: l.line, Doc: l.doc, Docs: l.docs, Object: object, Err: err}
}

// decoded is one object and where it came from.
type decoded struct {
	obj *unstructured.Unstructured
	loc location
	// ordered is the document as written, for an object with SOPS metadata (Bundle.Ordered).
	ordered []byte
}

// document is one YAML document of a file and its first line.
type document struct {
	data []byte
	line int
}

// decodeFile decodes every document of a manifest file, skipping empty ones, flattening
// lists and checking each object's identity fields. All bad documents are reported. Bytes
// and objects are counted in b, which stops the decoding once over a limit.
func decodeFile(root *os.Root, rel string, b *budget) ([]decoded, error) {
	data, err := readFile(root, rel, b)
	if IsTerminal(err) {
		return nil, err
	}
	if err != nil {
		return nil, fmt.Errorf("%s: %w", rel, err)
	}
	docs := []document{{data: data, line: 1}}
	if !strings.EqualFold(filepath.Ext(rel), ".json") {
		docs = splitDocuments(data)
	}
	var out []decoded
	var errs []error
	for i, d := range docs {
		loc := location{file: rel, line: d.line, doc: i + 1, docs: len(docs)}
		if len(docs) == 1 {
			loc.doc = 0 // "document 1 of 1" adds nothing
		}
		objs, err := decodeDocument(d, loc, b)
		if IsTerminal(err) {
			return nil, err
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := b.decoded(len(objs)); err != nil {
			return nil, err
		}
		out = append(out, objs...)
	}
	return out, errors.Join(errs...)
}

// splitDocuments splits a YAML stream on "---" lines, as kubectl does: a line starting with
// "---" followed by nothing or a comment.
func splitDocuments(data []byte) []document {
	var docs []document
	start, startLine, line := 0, 1, 1
	for pos := 0; pos < len(data); line++ {
		end := bytes.IndexByte(data[pos:], '\n')
		next := len(data)
		if end >= 0 {
			next = pos + end + 1
		}
		if isSeparator(data[pos:next]) {
			docs = append(docs, document{data: data[start:pos], line: startLine})
			start, startLine = next, line+1
		}
		pos = next
	}
	return append(docs, document{data: data[start:], line: startLine})
}

func isSeparator(line []byte) bool {
	rest, ok := bytes.CutPrefix(line, []byte("---"))
	if !ok {
		return false
	}
	rest = bytes.TrimSpace(rest)
	return len(rest) == 0 || rest[0] == '#'
}

// yamlLine matches the line a YAML error names ("yaml: line 12: ...").
var yamlLine = regexp.MustCompile(`^(?:yaml: )?line (\d+): `)

// decodeDocument converts one document to objects. A YAML error names its line once, as a
// line of the file (the location's), not a second number relative to the document. A
// document whose aliases expand it past maxSize bytes is refused before it is decoded.
func decodeDocument(d document, loc location, b *budget) ([]decoded, error) {
	if len(bytes.TrimSpace(d.data)) == 0 {
		return nil, nil
	}
	// The document is decoded in this process: its bytes count against MaxRenderOutput
	// before it is, as a render child's answer does, and its JSON's extra bytes after.
	if err := b.decodedBytes(loc.file, int64(len(d.data))); err != nil {
		return nil, err
	}
	js, err := d.data, error(nil)
	if !strings.EqualFold(path.Ext(loc.file), ".json") {
		if err := checkAliases(d.data, b.limits.MaxFileSize); err != nil {
			return nil, loc.wrap("", err)
		}
		js, err = yaml.YAMLToJSON(d.data)
		if err == nil {
			if err := b.decodedBytes(loc.file, int64(len(js)-len(d.data))); err != nil {
				return nil, err
			}
		}
	}
	if err != nil {
		msg := strings.TrimPrefix(err.Error(), "error converting YAML to JSON: ")
		if m := yamlLine.FindStringSubmatch(msg); m != nil {
			n, _ := strconv.Atoi(m[1])
			loc.line = d.line + n - 1
			msg = msg[len(m[0]):]
		}
		msg = strings.TrimPrefix(msg, "yaml: ")
		return nil, loc.errorf("", "invalid YAML: %s", msg)
	}
	js = bytes.TrimSpace(js)
	if bytes.Equal(js, []byte("null")) {
		return nil, nil // only comments
	}
	if len(js) == 0 || js[0] != '{' {
		return nil, loc.errorf("", "document is not a mapping")
	}
	var obj map[string]any
	if err := utiljson.Unmarshal(js, &obj); err != nil {
		// The error of the standard decoder carries the offset; utiljson's does not.
		var syn *json.SyntaxError
		if errors.As(json.Unmarshal(js, new(any)), &syn) {
			loc.line += bytes.Count(d.data[:min(int(syn.Offset), len(d.data))], []byte("\n"))
		}
		return nil, loc.wrap("", fmt.Errorf("invalid JSON: %w", err))
	}
	out, err := flatten(obj, loc)
	if _, ok := obj["sops"]; ok && err == nil && len(out) == 1 {
		out[0].ordered = d.data
	}
	return out, err
}

// flatten turns a v1 List (or any "*List" kind with items) into its items.
func flatten(obj map[string]any, loc location) ([]decoded, error) {
	u := &unstructured.Unstructured{Object: obj}
	items, isList := obj["items"].([]any)
	if !strings.HasSuffix(u.GetKind(), "List") || !isList {
		if err := checkObject(u); err != nil {
			return nil, loc.wrap(ObjectID(u), err)
		}
		return []decoded{{obj: u, loc: loc}}, nil
	}
	var out []decoded
	var errs []error
	for i, item := range items {
		m, ok := item.(map[string]any)
		if !ok {
			errs = append(errs, loc.errorf(u.GetKind(), "item %d of %d is not a mapping", i+1, len(items)))
			continue
		}
		iu := &unstructured.Unstructured{Object: m}
		if err := checkObject(iu); err != nil {
			errs = append(errs, loc.wrap(ObjectID(iu), fmt.Errorf("item %d of %d: %w", i+1, len(items), err)))
			continue
		}
		out = append(out, decoded{obj: iu, loc: loc})
	}
	return out, errors.Join(errs...)
}
