package studio

import (
	"bytes"
	"encoding/binary"
	"io"
	"testing"
	"testing/iotest"
)

// TestSizeWatch: the watch follows the messages' framing however the stream is cut, and remembers the
// first message over MaxMessageBytes.
func TestSizeWatch(t *testing.T) {
	msg := func(typ byte, body int) []byte {
		b := make([]byte, 5+body)
		b[0] = typ
		binary.BigEndian.PutUint32(b[1:], uint32(4+body))
		return b
	}
	var stream bytes.Buffer
	stream.Write(msg('T', 30))
	stream.Write(msg('D', MaxMessageBytes)) // at the limit: allowed
	stream.Write(msg('C', 0))
	for _, cut := range []func(io.Reader) io.Reader{iotest.OneByteReader, iotest.HalfReader, func(r io.Reader) io.Reader { return r }} {
		w := &sizeWatch{r: cut(bytes.NewReader(stream.Bytes()))}
		if _, err := io.Copy(io.Discard, w); err != nil {
			t.Fatal(err)
		}
		if w.over.Load() != 0 || w.hn != 0 || w.skip != 0 {
			t.Fatalf("messages within the limit: over=%d hn=%d skip=%d", w.over.Load(), w.hn, w.skip)
		}
	}
	stream.Write(msg('d', MaxMessageBytes+1))
	stream.Write(msg('D', MaxMessageBytes+2))
	w := &sizeWatch{r: iotest.HalfReader(bytes.NewReader(stream.Bytes()))}
	io.Copy(io.Discard, w)
	if w.over.Load() != MaxMessageBytes+1 {
		t.Fatalf("over = %d, want the first message over the limit (%d)", w.over.Load(), MaxMessageBytes+1)
	}
}
