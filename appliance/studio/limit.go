package studio

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

// MaxMessageBytes bounds every message a studio session reads from its server, a row (DataRow) or a row of
// COPY … TO STDOUT (CopyData) above all: a larger row cannot fit in an answer (DefaultCaps), and it is
// refused from its header, before any of it is read or allocated (pgconn's MaxProtocolMessageBodyLen).
// The session is then closed (the rest of the message is never read) and its pool opens another.
const MaxMessageBytes = 8 << 20

// TooLargeError is a run whose server sent a message over MaxMessageBytes; its session was closed.
type TooLargeError struct {
	Size  int // the message's body, in bytes
	Limit int
	Cause error
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("the server sent a message of %d bytes, over the studio's limit of %d", e.Size, e.Limit)
}

func (e *TooLargeError) Unwrap() error { return e.Cause }

// sizeWatch sits between a session's socket reader and its pgproto3.Frontend and reads the messages'
// headers as they pass (nothing is copied or held), remembering the first message over MaxMessageBytes.
// The frontend refuses that message and closes the session, but pgconn may then report only "conn closed"
// (an error met while it peeks at the next message is dropped): checkSize names the cause from this.
type sizeWatch struct {
	r    io.Reader
	hdr  [5]byte // a message's type byte and length, as far as read
	hn   int
	skip int          // the bytes left of the current message's body
	over atomic.Int64 // the body length of the first message over the limit; 0: none
}

func (w *sizeWatch) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	for b := p[:n]; len(b) > 0; {
		if w.skip > 0 {
			k := min(w.skip, len(b))
			w.skip -= k
			b = b[k:]
			continue
		}
		k := copy(w.hdr[w.hn:], b)
		w.hn += k
		b = b[k:]
		if w.hn < len(w.hdr) {
			continue
		}
		w.hn = 0
		body := int(int32(binary.BigEndian.Uint32(w.hdr[1:]))) - 4
		if body > MaxMessageBytes {
			w.over.CompareAndSwap(0, int64(body))
		}
		w.skip = max(body, 0)
	}
	return n, err
}

// sizeWatchKey is the key of a session's sizeWatch in its CustomData.
const sizeWatchKey = "studio.sizeWatch"

// watchSizes makes each session of a pool refuse messages over MaxMessageBytes and keep a sizeWatch
// (pgxpool's BeforeConnect hook: cc is this connection's own copy of the pool's configuration).
func watchSizes(_ context.Context, cc *pgx.ConnConfig) error {
	w := &sizeWatch{}
	cc.MaxProtocolMessageBodyLen = MaxMessageBytes
	cc.BuildFrontend = func(r io.Reader, wr io.Writer) *pgproto3.Frontend {
		w.r, w.hn, w.skip = r, 0, 0 // a new socket (another attempt): its messages start here
		w.over.Store(0)
		return pgproto3.NewFrontend(w, wr)
	}
	cc.AfterConnect = func(_ context.Context, c *pgconn.PgConn) error {
		c.CustomData()[sizeWatchKey] = w
		return nil
	}
	return nil
}

// checkSize is err, or a *TooLargeError when the session refused a message over MaxMessageBytes.
func checkSize(conn *pgconn.PgConn, err error) error {
	if err == nil {
		return nil
	}
	w, _ := conn.CustomData()[sizeWatchKey].(*sizeWatch)
	var big *pgproto3.ExceededMaxBodyLenErr
	switch {
	case errors.As(err, &big):
		return &TooLargeError{Size: big.ActualBodyLen, Limit: big.MaxExpectedBodyLen, Cause: err}
	case w != nil && w.over.Load() > 0:
		return &TooLargeError{Size: int(w.over.Load()), Limit: MaxMessageBytes, Cause: err}
	}
	return err
}
