package sources

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"

	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/converge-dev/converge/sources/internal/childproc"
)

// A render child answers with a stream of records, one JSON value each: one per resource,
// then one ending the answer. The parent decodes each resource as it arrives, counting its
// bytes and objects in the render's budget: it never holds the whole answer, and an answer
// past a limit is cut off as soon as it passes it.
type childRecord struct {
	Resource json.RawMessage `json:"r,omitempty"`
	// Origin is the file the resource was rendered from, when not the unit's own (a
	// chart's template).
	Origin string         `json:"o,omitempty"`
	End    *childResponse `json:"end,omitempty"`
}

// writeAnswer writes resources, with their origins if any (by index), then resp, as
// records.
func writeAnswer(out io.Writer, resources [][]byte, origins []string, resp childResponse) error {
	enc := json.NewEncoder(out)
	for i, r := range resources {
		rec := childRecord{Resource: r}
		if i < len(origins) {
			rec.Origin = origins[i]
		}
		if err := enc.Encode(rec); err != nil {
			return err
		}
	}
	return enc.Encode(childRecord{End: &resp})
}

// errAnswerOverBudget ends the read of an answer past the render's byte budget.
var errAnswerOverBudget = errors.New("render child answer over the byte budget")

// readAnswer decodes a render child's answer from r as it arrives: each resource into
// objects, counted in b. It returns the end record and the bytes read; a child that stops
// before its end record returns a nil response.
func readAnswer(r *childproc.Reader, file string, b *budget) ([]decoded, *childResponse, error) {
	dec := json.NewDecoder(r)
	var objs []decoded
	var errs []error
	single := map[int]int{} // resource index -> its object's index in objs
	for i := 0; ; i++ {
		var rec childRecord
		if err := dec.Decode(&rec); err != nil {
			if errors.Is(err, io.EOF) {
				return nil, nil, nil
			}
			return nil, nil, err
		}
		if rec.End != nil {
			for idx, y := range rec.End.Ordered {
				if at, ok := single[idx]; ok {
					objs[at].ordered = []byte(y)
				}
			}
			return objs, rec.End, errors.Join(errs...)
		}
		if err := b.answered(int64(len(rec.Resource))); err != nil {
			return nil, nil, err
		}
		loc := location{file: file}
		if rec.Origin != "" {
			loc.file = rec.Origin
		}
		var obj map[string]any
		if err := utiljson.Unmarshal(rec.Resource, &obj); err != nil {
			errs = append(errs, loc.wrap("", fmt.Errorf("render output: %w", err)))
			continue
		}
		d, err := flatten(obj, loc)
		if err := b.decoded(len(d)); err != nil {
			return nil, nil, err
		}
		if len(d) == 1 {
			single[i] = len(objs)
		}
		errs = append(errs, err)
		objs = append(objs, d...)
	}
}
