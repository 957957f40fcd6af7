package git

import (
	"bytes"
	"compress/zlib"
	"crypto/sha1"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
)

// deltaPack builds a pack of a 5-byte blob and a delta on it whose declared result is
// target bytes: a few dozen bytes of pack that a reader would inflate to target.
func deltaPack(t *testing.T, target uint64) []byte {
	t.Helper()
	deflate := func(b []byte) []byte {
		var out bytes.Buffer
		w := zlib.NewWriter(&out)
		_, _ = w.Write(b)
		_ = w.Close()
		return out.Bytes()
	}
	varint := func(n uint64) []byte { // a delta header's size: little-endian groups of 7 bits
		var b []byte
		for {
			c := byte(n & 0x7f)
			n >>= 7
			if n == 0 {
				return append(b, c)
			}
			b = append(b, c|0x80)
		}
	}
	var pack bytes.Buffer
	pack.WriteString("PACK")
	_ = binary.Write(&pack, binary.BigEndian, uint32(2))
	_ = binary.Write(&pack, binary.BigEndian, uint32(2))
	base := pack.Len()
	pack.WriteByte(3<<4 | 5) // a blob of 5 bytes
	pack.Write(deflate([]byte("hello")))
	delta := append(append(varint(5), varint(target)...), 1, 'x') // insert "x"
	if len(delta) > 15 {
		t.Fatalf("delta of %d bytes: the test writes its size in one byte", len(delta))
	}
	offset := pack.Len() - base
	if offset > 127 {
		t.Fatalf("offset %d: the test writes it in one byte", offset)
	}
	pack.WriteByte(6<<4 | byte(len(delta))) // an offset delta
	pack.WriteByte(byte(offset))
	pack.Write(deflate(delta))
	sum := sha1.Sum(pack.Bytes())
	pack.Write(sum[:])
	return pack.Bytes()
}

// TestCheckPackDeltaResult: a delta whose declared result is over the per-object limit is
// refused from its header, before anything is inflated to that size; one under it passes.
func TestCheckPackDeltaResult(t *testing.T) {
	_, err := checkPack(bytes.NewReader(deltaPack(t, 1<<40)), 1<<20)
	if !errors.Is(err, ErrTooLarge) || !strings.Contains(err.Error(), "delta result of 1099511627776 bytes, over the limit of 1048576 per file") {
		t.Errorf("checkPack of a delta to 1 TiB: %v, want ErrTooLarge naming the result's size and the limit", err)
	}
	if _, err := checkPack(bytes.NewReader(deltaPack(t, 6)), 1<<20); err != nil {
		t.Errorf("checkPack of a small delta: %v", err)
	}
}
