package sources

import (
	"bytes"
	"fmt"

	yamlv3 "go.yaml.in/yaml/v3"
)

// checkAliases refuses a YAML document whose aliases expand it past max bytes. Decoding
// copies an aliased node at each alias: a few kilobytes of anchors aliased many times, at a
// few levels, expand to gigabytes in the decoder, before any object is counted. The
// expanded size is computed on the parsed node tree, each node once, so the check costs one
// parse, and only for a document that has both an anchor and an alias.
// CheckAliases refuses YAML whose aliases expand it past max bytes (ErrFileTooLarge), before
// a decoder expands them: a few KiB of anchors can stand for gigabytes.
func CheckAliases(data []byte, max int64) error { return checkAliases(data, max) }

func checkAliases(data []byte, max int64) error {
	if bytes.IndexByte(data, '&') < 0 || bytes.IndexByte(data, '*') < 0 {
		return nil
	}
	var root yamlv3.Node
	if err := yamlv3.Unmarshal(data, &root); err != nil {
		return nil // the decoder reports it, with its line
	}
	sizes := map[*yamlv3.Node]int64{}
	if n := expandedSize(&root, sizes, max); n > max {
		return fmt.Errorf("%w: alias expansion exceeds %d bytes (raise the limit with --max-file-size)", ErrFileTooLarge, max)
	}
	return nil
}

// expandedSize returns about how many bytes n takes once its aliases are expanded (its
// scalars and a few bytes per node), stopping early past max; sizes memoizes each node's.
func expandedSize(n *yamlv3.Node, sizes map[*yamlv3.Node]int64, max int64) int64 {
	if n == nil {
		return 0
	}
	if s, ok := sizes[n]; ok {
		return s
	}
	sizes[n] = max + 1 // a cycle of aliases is refused too
	var s int64
	switch n.Kind {
	case yamlv3.AliasNode:
		s = expandedSize(n.Alias, sizes, max)
	case yamlv3.ScalarNode:
		s = int64(len(n.Value)) + 2
	default:
		s = 2
		for _, c := range n.Content {
			if s += expandedSize(c, sizes, max) + 1; s > max {
				break
			}
		}
	}
	sizes[n] = s
	return s
}
