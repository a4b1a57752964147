package postgres

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/theappliance/appliance/appliance/daemon"
)

var _ daemon.Readier = (*Instance)(nil)

// errStarting is a server that answers, but not yet with connections (57P03 cannot_connect_now: starting
// up, in crash recovery, shutting down).
var errStarting = errors.New("the server does not accept connections yet")

// Ready waits until the server accepts connections on 127.0.0.1:Port, the way pg_isready asks: a startup
// packet answered by an authentication request (or any error but 57P03 cannot_connect_now) means it
// does. The probe leaves before authenticating, which the server does not log.
func (i *Instance) Ready(ctx context.Context) error {
	var last error
	err := daemon.WaitFor(ctx, 20*time.Millisecond, func() (bool, error) {
		last = i.probe(ctx)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("instance %s: %w (last probe: %w)", i.ID, err, last)
	}
	return nil
}

// Accepting asks once whether the server accepts connections (Ready's probe): nil when it does.
func (i *Instance) Accepting(ctx context.Context) error { return i.probe(ctx) }

func (i *Instance) probe(ctx context.Context) error {
	dctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	c, err := d.DialContext(dctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(i.Port)))
	if err != nil {
		return err
	}
	defer c.Close()
	if dl, ok := dctx.Deadline(); ok {
		_ = c.SetDeadline(dl)
	}
	var body bytes.Buffer
	_ = binary.Write(&body, binary.BigEndian, uint32(196608)) // protocol 3.0
	body.WriteString("user\x00" + AdminRole + "\x00database\x00postgres\x00application_name\x00appliance ready probe\x00\x00")
	pkt := binary.BigEndian.AppendUint32(nil, uint32(4+body.Len()))
	if _, err := c.Write(append(pkt, body.Bytes()...)); err != nil {
		return err
	}
	r := bufio.NewReader(c)
	typ, err := r.ReadByte()
	if err != nil {
		return err
	}
	if typ == 'R' { // an authentication request: it accepts connections
		return nil
	}
	if typ != 'E' {
		return fmt.Errorf("unexpected answer %q to a startup packet", typ)
	}
	var n uint32
	if err := binary.Read(r, binary.BigEndian, &n); err != nil {
		return err
	}
	msg := make([]byte, max(int(n)-4, 0))
	if _, err := io.ReadFull(r, msg); err != nil {
		return err
	}
	for _, f := range bytes.Split(msg, []byte{0}) {
		if len(f) > 1 && f[0] == 'C' && string(f[1:]) == "57P03" {
			return errStarting
		}
	}
	return nil // it answers connections (with an error of their own, such as too many clients)
}
