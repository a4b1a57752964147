package kvproxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// storeConn is a connection to a store's socket logged in as the tenant user (RESP2), for the REST front.
type storeConn struct {
	net.Conn
	r    *bufio.Reader
	w    *bufio.Writer
	key  string
	used time.Time
}

// pool keeps idle connections per store socket and token. A rotated token's connections are closed by the
// store (CLIENT KILL USER), and a rotated token no longer resolves, so they are never asked for again; the
// janitor drops them with every connection idle too long.
type pool struct {
	mu      sync.Mutex
	idle    map[string][]*storeConn
	maxIdle int
	idleFor time.Duration
}

// maxIdle holds as many idle connections per store as a busy application keeps requests in flight (50
// keep-alive clients: bench/'s BenchmarkKVRESTvsBareHTTPS); at 16 the rest were dialled and logged in for
// one request and closed after it, twice the front's CPU per request.
func newPool() *pool {
	return &pool{idle: map[string][]*storeConn{}, maxIdle: 64, idleFor: time.Minute}
}

// get returns a live idle connection for (socket, token) or a new one, logged in.
func (p *pool) get(ctx context.Context, socket, token string) (*storeConn, error) {
	key := socket + "\x00" + token
	for {
		p.mu.Lock()
		list := p.idle[key]
		if len(list) == 0 {
			p.mu.Unlock()
			break
		}
		c := list[len(list)-1]
		p.idle[key] = list[:len(list)-1]
		p.mu.Unlock()
		if c.alive() {
			return c, nil
		}
		c.Close()
	}
	nc, err := dialStore(ctx, socket, DefaultStoreWait)
	if err != nil {
		return nil, err
	}
	c := &storeConn{Conn: nc, r: bufio.NewReaderSize(nc, 16<<10), w: bufio.NewWriterSize(nc, 16<<10), key: key}
	if dl, ok := ctx.Deadline(); ok {
		nc.SetDeadline(dl)
	}
	c.write([]string{"AUTH", TenantUser, token})
	if err := c.w.Flush(); err != nil {
		nc.Close()
		return nil, err
	}
	v, err := c.read()
	if err != nil {
		nc.Close()
		return nil, err
	}
	if e, ok := v.(respError); ok {
		nc.Close()
		return nil, e
	}
	nc.SetDeadline(time.Time{})
	return c, nil
}

// DefaultStoreWait is how long a front waits for a store's server that does not listen (the supervisor
// restarting it) before it answers that the store is unavailable.
const DefaultStoreWait = 5 * time.Second

// errStoreDown: the store's server does not listen on its socket.
var errStoreDown = errors.New("the key-value store's server does not listen")

// dialStore connects to a store's socket. While its server does not listen (restarting: the socket is gone
// or refuses) it tries again for up to wait: a client is relayed only to a server that runs with its users
// loaded (redis-server accepts connections in its event loop, which starts after it read users.acl).
func dialStore(ctx context.Context, socket string, wait time.Duration) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	var d net.Dialer
	for {
		c, err := d.DialContext(ctx, "unix", socket)
		if err == nil {
			return c, nil
		}
		if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, fs.ErrNotExist) && ctx.Err() == nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: %w", errStoreDown, err)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// put returns a connection whose last exchange ended cleanly.
func (p *pool) put(c *storeConn) {
	c.used = time.Now()
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.idle[c.key]) >= p.maxIdle {
		c.Close()
		return
	}
	p.idle[c.key] = append(p.idle[c.key], c)
}

// sweep closes connections idle longer than idleFor.
func (p *pool) sweep() {
	cut := time.Now().Add(-p.idleFor)
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, list := range p.idle {
		keep := list[:0]
		for _, c := range list {
			if c.used.Before(cut) {
				c.Close()
			} else {
				keep = append(keep, c)
			}
		}
		if len(keep) == 0 {
			delete(p.idle, k)
		} else {
			p.idle[k] = keep
		}
	}
}

// closeAll closes every idle connection.
func (p *pool) closeAll() {
	p.mu.Lock()
	defer p.mu.Unlock()
	for k, list := range p.idle {
		for _, c := range list {
			c.Close()
		}
		delete(p.idle, k)
	}
}

// alive reports whether the store still holds the connection open: an idle connection has nothing to
// read, so a peek that finds bytes or the end of the stream means the store closed it (CLIENT KILL, a
// restart) or broke the protocol. The peek does not wait (MSG_DONTWAIT): a read under a deadline already
// past would not look at the socket at all.
func (c *storeConn) alive() bool {
	if c.r.Buffered() > 0 {
		return false
	}
	sc, ok := c.Conn.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	idle := false
	var b [1]byte
	if err := raw.Read(func(fd uintptr) bool {
		_, _, err := syscall.Recvfrom(int(fd), b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		idle = errors.Is(err, syscall.EAGAIN)
		return true // answered: never wait for the socket
	}); err != nil {
		return false
	}
	return idle
}

// write queues a command as a RESP array of bulk strings.
func (c *storeConn) write(args []string) {
	c.w.Write(appendLen(c.w.AvailableBuffer(), '*', len(args)))
	for _, a := range args {
		c.w.Write(appendLen(c.w.AvailableBuffer(), '$', len(a)))
		c.w.WriteString(a)
		c.w.WriteString("\r\n")
	}
}

// appendLen appends a RESP length line (*3, $5) without formatting through fmt.
func appendLen(b []byte, kind byte, n int) []byte {
	return append(strconv.AppendInt(append(b, kind), int64(n), 10), '\r', '\n')
}

// respError is a Redis error reply.
type respError string

func (e respError) Error() string { return string(e) }

// status is a Redis simple-string reply (+OK).
type status string

// maxReplyDepth bounds the nesting of arrays a reply may have.
const maxReplyDepth = 64

// read reads one RESP2 reply: status, respError, int64, []byte (bulk), nil, or []any.
func (c *storeConn) read() (any, error) { return readReply(c.r, 0) }

func readReply(r *bufio.Reader, depth int) (any, error) {
	line, err := r.ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	if len(line) < 3 || line[len(line)-2] != '\r' {
		return nil, errors.New("kv store: malformed reply")
	}
	body := string(line[1 : len(line)-2])
	switch line[0] {
	case '+':
		return status(body), nil
	case '-':
		return respError(body), nil
	case ':':
		return strconv.ParseInt(body, 10, 64)
	case '$':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		b := make([]byte, n+2)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		return b[:n], nil
	case '*':
		n, err := strconv.Atoi(body)
		if err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, nil
		}
		if depth >= maxReplyDepth {
			return nil, errors.New("kv store: reply nested too deep")
		}
		out := make([]any, 0, min(n, 1024))
		for range n {
			v, err := readReply(r, depth+1)
			if err != nil {
				return nil, err
			}
			out = append(out, v)
		}
		return out, nil
	}
	return nil, fmt.Errorf("kv store: unexpected reply type %q", line[0])
}
