package pglog

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
)

// chunkSize is how much a backward read takes at a time, and the forward readers' buffer.
const chunkSize = 64 << 10

// readBackward calls fn with each complete line of the first size bytes of f, the last line first, and
// the offset just past the line's '\n', until fn returns false. The line passed has no '\n' and is only
// valid during the call. Bytes after the last '\n' (a line still being written) are not a line. It
// returns the end of the complete lines: the offset past the last '\n', 0 when there is none.
func readBackward(f io.ReaderAt, size int64, fn func(line []byte, end int64) bool) (int64, error) {
	var bufs [2][]byte
	var carry []byte // the start of the file's content up to a line end: its first line starts before it
	end := int64(-1)
	at := size
	for turn := 0; at > 0; turn++ {
		n := int64(chunkSize)
		if n > at {
			n = at
		}
		at -= n
		need := int(n) + len(carry)
		buf := bufs[turn%2] // carry points into the other buffer
		if cap(buf) < need {
			buf = make([]byte, need, max(need, 2*chunkSize))
			bufs[turn%2] = buf
		}
		data := buf[:need]
		if _, err := f.ReadAt(data[:n], at); err != nil && err != io.EOF {
			return 0, fmt.Errorf("read log: %w", err)
		}
		copy(data[n:], carry)
		carry = nil
		// data is [at, at+len(data)) of the file.
		if end < 0 {
			k := bytes.LastIndexByte(data, '\n')
			if k < 0 {
				continue // all of it belongs to an incomplete last line
			}
			end = at + int64(k) + 1
			data = data[:k+1]
		}
		// data ends just past a '\n'.
		lineEnd := len(data)
		for {
			k := bytes.LastIndexByte(data[:lineEnd-1], '\n')
			if k < 0 {
				carry = data[:lineEnd]
				break
			}
			if !fn(data[k+1:lineEnd-1], at+int64(lineEnd)) {
				return end, nil
			}
			lineEnd = k + 1
		}
	}
	if len(carry) > 0 { // the file's first line
		fn(carry[:len(carry)-1], int64(len(carry)))
	}
	if end < 0 {
		end = 0
	}
	return end, nil
}

// lastLineEnd returns the offset just past the last '\n' in the first size bytes of f (0 if none).
func lastLineEnd(f io.ReaderAt, size int64) (int64, error) {
	return readBackward(f, size, func([]byte, int64) bool { return false })
}

// readForward calls fn with each complete line that r yields, r's content being positioned at start,
// and the offset just past the line's '\n', until fn returns false or r ends. The line has no '\n' and
// is only valid during the call. A last line without '\n' is not read. It returns the offset past the
// last line read.
func readForward(r io.Reader, start int64, fn func(line []byte, end int64) bool) (int64, error) {
	br := bufio.NewReaderSize(r, chunkSize)
	off := start
	var long []byte
	for {
		b, err := br.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			long = append(long, b...)
			continue
		}
		if err == io.EOF {
			return off, nil
		}
		if err != nil {
			return off, fmt.Errorf("read log: %w", err)
		}
		line := b
		if len(long) > 0 {
			long = append(long, b...)
			line = long
		}
		off += int64(len(line))
		if !fn(line[:len(line)-1], off) {
			return off, nil
		}
		long = long[:0]
	}
}
