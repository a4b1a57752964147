package kvproxy

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/theappliance/appliance/httpapi/connlimit"
)

// The relay: once a client has authenticated, its bytes and the store's are copied by an event loop rather
// than by two goroutines per connection. A loop waits in epoll_wait (level-triggered) for every connection
// it holds, reads what a socket has once per wake-up, and writes it on at once: four system calls per
// round trip and an epoll_wait shared by all the connections ready at that moment, where the goroutine
// relay made seven (a read that finds nothing before each wait, in both directions) and two goroutine
// wake-ups (bench/README.md, "The RESP front against HAProxy").
//
// TLS stays crypto/tls's: after the handoff the client's tls.Conn reads from and writes to memory
// (loopConn), and the loop moves those bytes to and from the socket. A read that finds no more bytes
// answers a temporary error, which crypto/tls does not keep (the connection stays usable), so a partial
// record waits in the tls.Conn for the rest.

// wouldBlock is what a loopConn's Read answers when it has no bytes: a temporary net.Error, which
// crypto/tls returns without marking the connection broken.
type wouldBlock struct{}

func (wouldBlock) Error() string   { return "kvproxy relay: no bytes yet" }
func (wouldBlock) Timeout() bool   { return true }
func (wouldBlock) Temporary() bool { return true }

// loopConn is the connection under a client's tls.Conn. Until the handoff it is the accepted connection;
// after it, Read serves in (bytes the loop read from the socket) and Write appends to out (bytes the loop
// writes to the socket).
type loopConn struct {
	net.Conn
	loop bool
	in   []byte
	out  []byte
	// inShared: in is part of the loop's read buffer (the pair copies what is left of it before the next
	// read); outShared: out is the loop's encryption buffer.
	inShared, outShared bool
}

func (c *loopConn) Read(p []byte) (int, error) {
	if !c.loop {
		return c.Conn.Read(p)
	}
	if len(c.in) == 0 {
		return 0, wouldBlock{}
	}
	n := copy(p, c.in)
	c.in = c.in[n:]
	return n, nil
}

func (c *loopConn) Write(p []byte) (int, error) {
	if !c.loop {
		return c.Conn.Write(p)
	}
	c.out = append(c.out, p...)
	return len(p), nil
}

// NetConn is the accepted connection (connlimit finds its own through it).
func (c *loopConn) NetConn() net.Conn { return c.Conn }

// maxPending is how many bytes a pair holds for a side that does not take them (its socket buffer full)
// before the loop stops reading the other side.
const maxPending = 256 << 10

// pair is a client and its store's connection, held by a loop.
type pair struct {
	slot      int
	client    net.Conn // the accepted connection (connlimit's): closed when the pair ends, for its slot
	lc        *loopConn
	tc        *tls.Conn
	cfd, ufd  int    // the sockets, duplicated from the connections (whose own descriptors are closed)
	toStore   []byte // plaintext the store's socket has not taken yet
	clientEOF bool   // the client finished sending (the store's socket is shut for writing once toStore is sent)
	storeShut bool
	storeEOF  bool
	cEvents   uint32 // the events registered for each socket
	uEvents   uint32
}

// relayLoop is one event loop and the pairs it holds.
type relayLoop struct {
	s    *Server
	epfd int
	wake int // an eventfd: new pairs and Stop
	mu   sync.Mutex
	add  []*pair
	stop bool

	pairs []*pair // by slot
	free  []int
	buf   []byte // what a socket read brings
	plain []byte // what a client's records decrypt to
	out   []byte // what the store's bytes encrypt to (lc.out while it is written)
	done  chan struct{}
}

// yieldEvery is how often a loop yields to Go's scheduler (run).
const yieldEvery = 2 * time.Millisecond

// wakeKey is the eventfd's key in the epoll set; a pair's sockets are 2·slot (client) and 2·slot+1.
const wakeKey = -1

func newRelayLoop(s *Server) (*relayLoop, error) {
	epfd, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("kvproxy relay: epoll: %w", err)
	}

	wake, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		unix.Close(epfd)
		return nil, fmt.Errorf("kvproxy relay: eventfd: %w", err)
	}
	if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_ADD, wake, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: wakeKey}); err != nil {
		unix.Close(epfd)
		unix.Close(wake)
		return nil, fmt.Errorf("kvproxy relay: epoll: %w", err)
	}
	l := &relayLoop{s: s, epfd: epfd, wake: wake, buf: make([]byte, 64<<10), plain: make([]byte, 64<<10), done: make(chan struct{})}
	go l.run()
	return l, nil
}

// dupFD duplicates c's socket (non-blocking, close-on-exec: the same open socket). Once c's own descriptor
// is closed (closeRaw), the socket has left Go's poller and belongs to the loop.
func dupFD(c net.Conn) (int, error) {
	if cc, ok := c.(*connlimit.Conn); ok {
		c = cc.Conn
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return -1, fmt.Errorf("kvproxy relay: a %T has no descriptor", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return -1, err
	}
	fd, derr := -1, error(nil)
	if err := rc.Control(func(f uintptr) { fd, derr = unix.FcntlInt(f, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
		return -1, err
	}
	if derr != nil {
		return -1, fmt.Errorf("kvproxy relay: dup: %w", derr)
	}
	return fd, nil
}

// closeRaw closes c's own descriptor (for the client, not connlimit's record of its slot).
func closeRaw(c net.Conn) {
	if cc, ok := c.(*connlimit.Conn); ok {
		c = cc.Conn
	}
	c.Close()
}

// handoff gives the loop an authenticated client (lc under tc; client is the accepted connection) and its
// store's connection, with first (the authenticating command and what followed it) to send to the store.
// It reports false, having changed nothing, when the sockets cannot be taken (the caller then splices).
func (l *relayLoop) handoff(client net.Conn, lc *loopConn, tc *tls.Conn, up net.Conn, first []byte) bool {
	cfd, err := dupFD(client)
	if err != nil {
		return false
	}
	ufd, err := dupFD(up)
	if err != nil {
		unix.Close(cfd)
		return false
	}
	closeRaw(client)
	up.Close()
	lc.loop = true
	p := &pair{client: client, lc: lc, tc: tc, cfd: cfd, ufd: ufd, toStore: first}
	l.s.wg.Add(1) // done when the pair ends
	l.mu.Lock()
	if l.stop {
		l.mu.Unlock()
		l.close(p)
		return true
	}
	l.add = append(l.add, p)
	l.mu.Unlock()
	l.signal()
	return true
}

func (l *relayLoop) signal() {
	one := [8]byte{1}
	unix.Write(l.wake, one[:])
}

// shutdown ends every pair of the loop and the loop; it returns once the loop has stopped.
func (l *relayLoop) shutdown() {
	l.mu.Lock()
	l.stop = true
	l.mu.Unlock()
	l.signal()
	<-l.done
}

func (l *relayLoop) run() {
	defer close(l.done)
	events := make([]unix.EpollEvent, 128)
	last := time.Now()
	for {
		// The loop yields to Go's scheduler every couple of milliseconds. A goroutine that never does is,
		// to the runtime, one running since it started (its system calls do not count): every 10 ms sysmon
		// preempts it, or takes its P while it is in a system call, and each time sysmon goes back to
		// waking every 20 µs (about 100,000 nanosleeps per 100,000 requests under strace): 1.2-1.5 µs of
		// CPU per request, 8 % of the front's at -P 1 (bench/README.md, "The RESP front against HAProxy").
		if now := time.Now(); now.Sub(last) >= yieldEvery {
			last = now
			runtime.Gosched()
		}
		// A blocking epoll_wait: waiting for the epoll set in Go's poller instead (the set is readable
		// while it has events) cost a goroutine wake-up per wait, 25-30 % more CPU per request in the bench.
		n, err := unix.EpollWait(l.epfd, events, -1)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			l.s.log().Error("kv front relay: epoll_wait", "err", err)
			l.stopAll()
			return
		}
		for _, ev := range events[:n] {
			key := int(ev.Fd)
			if key == wakeKey {
				var b [8]byte
				unix.Read(l.wake, b[:])
				if l.admit() {
					l.stopAll()
					return
				}
				continue
			}
			p := l.pairs[key/2]
			if p == nil { // ended by an earlier event of this wake-up
				continue
			}
			if key%2 == 0 {
				l.clientReady(p, ev.Events)
			} else {
				l.storeReady(p, ev.Events)
			}
		}
	}
}

// admit registers the pairs handed off since the last wake-up and starts them (the first bytes to the
// store, and what the tls.Conn holds already); it reports whether the loop is to stop.
func (l *relayLoop) admit() bool {
	l.mu.Lock()
	add, stop := l.add, l.stop
	l.add = nil
	l.mu.Unlock()
	for _, p := range add {
		if stop {
			l.close(p)
			continue
		}
		if len(l.free) > 0 {
			p.slot, l.free = l.free[len(l.free)-1], l.free[:len(l.free)-1]
			l.pairs[p.slot] = p
		} else {
			p.slot = len(l.pairs)
			l.pairs = append(l.pairs, p)
		}
		p.cEvents, p.uEvents = unix.EPOLLIN, unix.EPOLLIN
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, p.cfd, &unix.EpollEvent{Events: p.cEvents, Fd: int32(2 * p.slot)}); err != nil {
			l.end(p)
			continue
		}
		if err := unix.EpollCtl(l.epfd, unix.EPOLL_CTL_ADD, p.ufd, &unix.EpollEvent{Events: p.uEvents, Fd: int32(2*p.slot + 1)}); err != nil {
			l.end(p)
			continue
		}
		if l.flushStore(p) {
			l.interest(p)
		}
	}
	return stop
}

// clientReady: the client's socket is readable (or writable, or failed).
func (l *relayLoop) clientReady(p *pair, ev uint32) {
	if ev&unix.EPOLLERR != 0 {
		l.end(p)
		return
	}
	if ev&unix.EPOLLOUT != 0 && !l.flushClient(p) {
		return
	}
	if ev&(unix.EPOLLIN|unix.EPOLLHUP) != 0 && p.cEvents&unix.EPOLLIN != 0 {
		n, err := readFD(p.cfd, l.buf)
		switch {
		case err == unix.EAGAIN:
		case err != nil:
			l.end(p)
			return
		case n == 0:
			p.clientEOF = true
		default:
			if len(p.lc.in) == 0 {
				p.lc.in, p.lc.inShared = l.buf[:n], true
			} else {
				p.lc.in = append(p.lc.in, l.buf[:n]...)
			}
			if !l.decrypt(p) {
				return
			}
		}
	} else if ev&unix.EPOLLHUP != 0 {
		// Gone both ways while its bytes wait for the store: nothing more can reach it.
		l.end(p)
		return
	}
	l.interest(p)
}

// decrypt reads what the tls.Conn can give and sends it to the store; false: the pair ended.
func (l *relayLoop) decrypt(p *pair) bool {
	for len(p.toStore) == 0 {
		n, err := p.tc.Read(l.plain)
		if n > 0 {
			w, werr := writeFD(p.ufd, l.plain[:n])
			if werr != nil && werr != unix.EAGAIN {
				l.end(p)
				return false
			}
			if w < n {
				p.toStore = append(p.toStore, l.plain[w:n]...)
			}
		}
		if err != nil {
			var wb wouldBlock
			if errors.As(err, &wb) {
				break
			}
			if err != io.EOF { // a record that fails to decrypt, an alert
				l.end(p)
				return false
			}
			p.clientEOF = true // close_notify
			break
		}
	}
	// Whatever the tls.Conn did not take stays the pair's (l.buf is the next read's).
	if p.lc.inShared {
		p.lc.in, p.lc.inShared = append([]byte(nil), p.lc.in...), false
		if len(p.lc.in) == 0 {
			p.lc.in = nil
		}
	}
	return l.flushClient(p) // a KeyUpdate's answer, an alert
}

// flushStore writes what the store's socket has not taken, then (all of it taken) what waited in the
// tls.Conn meanwhile; false: the pair ended.
func (l *relayLoop) flushStore(p *pair) bool {
	if len(p.toStore) > 0 {
		w, err := writeFD(p.ufd, p.toStore)
		if err != nil && err != unix.EAGAIN {
			l.end(p)
			return false
		}
		if p.toStore = p.toStore[:copy(p.toStore, p.toStore[w:])]; len(p.toStore) > 0 {
			return true
		}
		p.toStore = nil
	}
	return l.decrypt(p)
}

// storeReady: the store's socket is readable (or writable, or closed).
func (l *relayLoop) storeReady(p *pair, ev uint32) {
	if ev&unix.EPOLLOUT != 0 && !l.flushStore(p) {
		return
	}
	if ev&(unix.EPOLLIN|unix.EPOLLHUP|unix.EPOLLERR) != 0 && (p.uEvents&unix.EPOLLIN != 0 || ev&(unix.EPOLLHUP|unix.EPOLLERR) != 0) {
		n, err := readFD(p.ufd, l.buf)
		switch {
		case err == unix.EAGAIN:
		case err != nil || n == 0:
			// The store closed (a rotation's CLIENT KILL, a deleted store) or answered the client's end:
			// the client is sent what is left, then cut off.
			p.storeEOF = true
		default:
			if len(p.lc.out) == 0 {
				p.lc.out, p.lc.outShared = l.out[:0], true
			}
			if _, err := p.tc.Write(l.buf[:n]); err != nil {
				l.end(p)
				return
			}
			if p.lc.outShared {
				l.out = p.lc.out[:0] // it may have grown
			}
			if !l.flushClient(p) {
				return
			}
		}
	}
	if p.storeEOF && len(p.lc.out) == 0 {
		l.end(p)
		return
	}
	l.interest(p)
}

// flushClient writes lc.out to the client's socket; false: the pair ended.
func (l *relayLoop) flushClient(p *pair) bool {
	out := p.lc.out
	if len(out) == 0 {
		return true
	}
	w, err := writeFD(p.cfd, out)
	if err != nil && err != unix.EAGAIN {
		l.end(p)
		return false
	}
	if w == len(out) {
		p.lc.out, p.lc.outShared = nil, false
		if p.storeEOF {
			l.end(p)
			return false
		}
		return true
	}
	if p.lc.outShared { // l.out's bytes: the pair keeps its own copy
		p.lc.out, p.lc.outShared = append([]byte(nil), out[w:]...), false
	} else {
		p.lc.out = out[:copy(out, out[w:])]
	}
	return true
}

// interest registers what each socket waits for: a side's input while the other side takes what it is
// sent, its output while it has bytes waiting. A client that finished sending has the store's socket shut
// for writing once the store has its last bytes (the store answers what it has, then ends); a store that
// ended leaves the epoll set (its hang-up would be reported on every wait).
func (l *relayLoop) interest(p *pair) {
	if p.clientEOF && len(p.toStore) == 0 && !p.storeShut {
		p.storeShut = true
		unix.Shutdown(p.ufd, unix.SHUT_WR)
	}
	var c, u uint32
	if !p.clientEOF && len(p.toStore) < maxPending {
		c |= unix.EPOLLIN
	}
	if len(p.lc.out) > 0 {
		c |= unix.EPOLLOUT
	}
	if !p.storeEOF && len(p.lc.out) < maxPending {
		u |= unix.EPOLLIN
	}
	if len(p.toStore) > 0 && !p.storeEOF {
		u |= unix.EPOLLOUT
	}
	if c != p.cEvents {
		p.cEvents = c
		unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, p.cfd, &unix.EpollEvent{Events: c, Fd: int32(2 * p.slot)})
	}
	if u != p.uEvents {
		p.uEvents = u
		if p.storeEOF {
			unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, p.ufd, nil)
		} else {
			unix.EpollCtl(l.epfd, unix.EPOLL_CTL_MOD, p.ufd, &unix.EpollEvent{Events: u, Fd: int32(2*p.slot + 1)})
		}
	}
}

// end closes a registered pair and frees its slot.
func (l *relayLoop) end(p *pair) {
	if l.pairs[p.slot] == p {
		l.pairs[p.slot] = nil
		l.free = append(l.free, p.slot)
	}
	unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, p.cfd, nil)
	unix.EpollCtl(l.epfd, unix.EPOLL_CTL_DEL, p.ufd, nil)
	l.close(p)
}

// close ends a pair: a close_notify to the client (best effort: its socket may be full), both sockets
// closed, the client's slot freed.
func (l *relayLoop) close(p *pair) {
	p.tc.Close() // writes the alert into lc.out; closing lc's connection (already closed) does nothing
	if len(p.lc.out) > 0 {
		writeFD(p.cfd, p.lc.out)
	}
	unix.Close(p.cfd)
	unix.Close(p.ufd)
	l.s.untrack(p.client)
	l.s.wg.Done()
}

// stopAll ends every pair (Stop) and closes the loop's descriptors.
func (l *relayLoop) stopAll() {
	l.mu.Lock()
	l.stop = true
	add := l.add
	l.add = nil
	l.mu.Unlock()
	for _, p := range add {
		l.close(p)
	}
	for _, p := range l.pairs {
		if p != nil {
			l.end(p)
		}
	}
	unix.Close(l.epfd)
	unix.Close(l.wake)
}

// readFD and writeFD are read(2) and write(2), retried when a signal interrupts them.
func readFD(fd int, b []byte) (int, error) {
	for {
		n, err := unix.Read(fd, b)
		if err != unix.EINTR {
			if n < 0 {
				n = 0
			}
			return n, err
		}
	}
}

func writeFD(fd int, b []byte) (int, error) {
	total := 0
	for total < len(b) {
		n, err := unix.Write(fd, b[total:])
		if n > 0 {
			total += n
		}
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
