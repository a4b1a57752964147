// Package etcdembed runs etcd members inside the process (go.etcd.io/etcd/server/v3/embed) and hands out
// clients of them: the metadata store's etcd backend in the store's tests now, the appliances of a cluster
// later. Start makes a single-member cluster on loopback ports (a free pair unless given); StartCluster
// makes a cluster of several members in the process, each of which can be stopped and started again on
// its data directory (a restart).
package etcdembed

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3rpc"
	"go.etcd.io/etcd/server/v3/proxy/grpcproxy/adapter"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// The limits the member is started with. etcd's defaults (1.5 MiB a request, 128 operations a
// transaction) are below what one store transaction may write (an index filled as a store opens, a
// sweep deleting many records, a job's captured output): a store transaction is one etcd Txn.
const (
	MaxRequestBytes = 8 << 20
	MaxTxnOps       = 16384
)

// Config says where the member lives.
type Config struct {
	Dir  string // its data directory (created)
	Name string // the member's name ("default" when empty)
	Host string // the address it listens on and advertises (127.0.0.1 when empty)
	// ClientPort and PeerPort (free ones when 0).
	ClientPort, PeerPort int
	// LogLevel is the member's (zap's: debug, info, warn, error, panic, fatal; error when empty).
	LogLevel string
	// TLS, when set, makes the member serve its clients and its peers over mutual TLS (https URLs): both
	// present a certificate of the CA and are refused without one.
	TLS *TLSFiles
	// InitialCluster names the cluster's members ("name=peer URL,…") when the member joins an existing
	// cluster (ClusterState "existing"); empty: a new cluster of this member alone.
	InitialCluster string
	// ClusterState is "new" (the default) or "existing" (a member added to a running cluster).
	ClusterState string
}

// TLSFiles are the PEM files of a member's mutual TLS: its certificate (for its host, good for server
// and client authentication: it serves its clients and peers and dials its peers with it) and key, and
// the CA that every client and peer must present a certificate of; CRLFile (optional, DER) lists the
// certificates of that CA refused all the same (read at each new connection: it may be replaced while the
// member runs, and must exist while it does).
type TLSFiles struct {
	CertFile, KeyFile, CAFile, CRLFile string
}

// Server is a running member.
type Server struct {
	etcd      *embed.Etcd
	ClientURL string
	stopOnce  sync.Once
	mu        sync.Mutex
	grpcs     []*grpc.Server // the member's client servers (for cut)
}

// Start starts the member and waits until it serves (or ctx ends).
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.resolve(); err != nil {
		return nil, err
	}
	peer := cfg.peerURL()
	initial := cfg.Name + "=" + peer.String()
	if cfg.InitialCluster != "" {
		initial = cfg.InitialCluster
	}
	s, err := cfg.launch(initial)
	if err != nil {
		return nil, err
	}
	if err := s.wait(ctx, cfg.Dir); err != nil {
		return nil, err
	}
	return s, nil
}

// resolve fills the defaults and picks the free ports.
func (cfg *Config) resolve() error {
	if cfg.Dir == "" {
		return errors.New("start etcd: no data directory")
	}
	if cfg.Name == "" {
		cfg.Name = "default"
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	var err error
	for _, p := range []*int{&cfg.ClientPort, &cfg.PeerPort} {
		if *p == 0 {
			if *p, err = freePort(cfg.Host); err != nil {
				return fmt.Errorf("start etcd: %w", err)
			}
		}
	}
	return nil
}

func (cfg Config) scheme() string {
	if cfg.TLS != nil {
		return "https"
	}
	return "http"
}

func (cfg Config) clientURL() url.URL {
	return url.URL{Scheme: cfg.scheme(), Host: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.ClientPort))}
}

func (cfg Config) peerURL() url.URL {
	return url.URL{Scheme: cfg.scheme(), Host: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.PeerPort))}
}

// ClientURL is the member's client URL (ports resolved: after Start).
func (cfg Config) ClientURL() string { u := cfg.clientURL(); return u.String() }

// PeerURL is the member's peer URL.
func (cfg Config) PeerURL() string { u := cfg.peerURL(); return u.String() }

// launch starts the member of a resolved config in the cluster initialCluster names ("name=peer URL,…";
// read only when the data directory holds no member yet), without waiting for it to serve.
func (cfg Config) launch(initialCluster string) (*Server, error) {
	client, peer := cfg.clientURL(), cfg.peerURL()
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	ec.InitialCluster = initialCluster
	if cfg.ClusterState != "" {
		ec.ClusterState = cfg.ClusterState
	}
	if cfg.TLS != nil {
		// A peer's certificate must be of the CA; its addresses are not checked against the connection's
		// source address (a machine of several addresses dials from whichever its routes pick, not
		// necessarily the one it advertises).
		info := transport.TLSInfo{CertFile: cfg.TLS.CertFile, KeyFile: cfg.TLS.KeyFile, TrustedCAFile: cfg.TLS.CAFile, ClientCertAuth: true, SkipClientSANVerify: true,
			CRLFile: cfg.TLS.CRLFile}
		ec.ClientTLSInfo, ec.PeerTLSInfo = info, info
		ec.ClientAutoTLS, ec.PeerAutoTLS = false, false
	}
	ec.MaxRequestBytes = MaxRequestBytes
	ec.MaxTxnOps = MaxTxnOps
	ec.LogLevel = cfg.LogLevel
	if ec.LogLevel == "" {
		ec.LogLevel = "error"
	}
	s := &Server{ClientURL: client.String()}
	ec.ServiceRegister = func(g *grpc.Server) {
		s.mu.Lock()
		s.grpcs = append(s.grpcs, g)
		s.mu.Unlock()
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start etcd in %s: %w", cfg.Dir, err)
	}
	s.etcd = e
	return s, nil
}

// wait waits until the launched member serves (a member of several: once the cluster has a quorum);
// it stops the member when that fails.
func (s *Server) wait(ctx context.Context, dir string) error {
	select {
	case <-s.etcd.Server.ReadyNotify():
		return nil
	case err := <-s.etcd.Err():
		s.Stop()
		return fmt.Errorf("start etcd in %s: %w", dir, err)
	case <-ctx.Done():
		s.Stop()
		return fmt.Errorf("start etcd in %s: %w", dir, ctx.Err())
	}
}

// Client is a new client of the member (the caller closes it), its send limit matching the member's.
func (s *Server) Client() (*clientv3.Client, error) { return newClient([]string{s.ClientURL}) }

// reconnect is how a client connects again to a member it lost: gRPC's default waits grow to two
// minutes, which would leave a member restarted in a second unused (or, named alone, unreachable) for
// long after.
var reconnect = grpc.WithConnectParams(grpc.ConnectParams{
	Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
	MinConnectTimeout: 5 * time.Second,
})

// newClient is a client of the endpoints, its send limit matching the members'.
func newClient(endpoints []string) (*clientv3.Client, error) { return NewClient(endpoints, nil) }

// NewClient is a client of the endpoints (over TLS with tc: https endpoints), its send limit matching the
// members' and its reconnections quick. Its requests carry their own deadlines (the store's).
func NewClient(endpoints []string, tc *tls.Config) (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:            endpoints,
		DialTimeout:          10 * time.Second,
		DialOptions:          []grpc.DialOption{reconnect},
		MaxCallSendMsgSize:   MaxRequestBytes + 1<<20,
		TLS:                  tc,
		DialKeepAliveTime:    5 * time.Second,
		DialKeepAliveTimeout: 5 * time.Second,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client of %s: %w", strings.Join(endpoints, ","), err)
	}
	return c, nil
}

// LocalKV is a client whose KV requests (reads and transactions) call this member in process: no TLS,
// gRPC framing or loopback connection on a request's path, as a client of the member's URL has (an API
// write through a cluster's node is 0.7 ms faster so on 2 cores; bench/README.md). A read the member refuses as unavailable
// (no leader yet, a leader change, a read index that timed out) is tried again as clientv3 does over a
// connection; writes are not (their outcome may be unknown). Its watches, leases and cluster calls are
// over's, a client of the member's URL: their streams keep what the member's gRPC server gives them (a
// watch that requires a leader ends when the member loses it). Closing it closes neither over nor the
// member.
func (s *Server) LocalKV(over *clientv3.Client) *clientv3.Client {
	c := clientv3.NewCtxClient(context.Background(), clientv3.WithZapLogger(s.etcd.Server.Logger()))
	c.KV = clientv3.NewKVFromKVClient(retryReads{adapter.KvServerToKvClient(v3rpc.NewQuotaKVServer(s.etcd.Server))}, c)
	c.Watcher, c.Lease = unclosedWatcher{over.Watcher}, unclosedLease{over.Lease}
	c.Cluster, c.Maintenance, c.Auth = over.Cluster, over.Maintenance, over.Auth
	return c
}

// unclosedWatcher and unclosedLease are another client's, which closes them (not the LocalKV client's Close).
type unclosedWatcher struct{ clientv3.Watcher }

func (unclosedWatcher) Close() error { return nil }

type unclosedLease struct{ clientv3.Lease }

func (unclosedLease) Close() error { return nil }

// Reads refused as unavailable are tried again every readRetryWait, readRetries times at most (within
// the request's context): clientv3's own policy for a client of one endpoint (defaultUnaryMaxRetries,
// defaultBackoffWaitBetween), which spans a leader election.
const (
	readRetries   = 100
	readRetryWait = 25 * time.Millisecond
)

// retryReads is a KV client whose reads (Range) are tried again while the member answers them
// unavailable, as clientv3's retry interceptor does for reads over a connection.
type retryReads struct{ pb.KVClient }

func (r retryReads) Range(ctx context.Context, in *pb.RangeRequest, opts ...grpc.CallOption) (*pb.RangeResponse, error) {
	for attempt := 1; ; attempt++ {
		resp, err := r.KVClient.Range(ctx, in, opts...)
		if err == nil || status.Code(err) != codes.Unavailable || attempt == readRetries {
			return resp, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(readRetryWait):
		}
	}
}

// Etcd is the embedded member (its server: leader, member id, raft status).
func (s *Server) Etcd() *embed.Etcd { return s.etcd }

// Err receives the member's fatal error, if it fails after it started.
func (s *Server) Err() <-chan error { return s.etcd.Err() }

// Stop stops the member (once; later calls do nothing).
func (s *Server) Stop() {
	s.stopOnce.Do(s.etcd.Close)
}

// cut closes the member's client connections at once: requests under way fail (their outcome unknown to
// their clients) and streams (watches) end, rather than being waited for as Stop does (up to etcd's
// request timeout, seconds).
func (s *Server) cut() {
	s.mu.Lock()
	grpcs := s.grpcs
	s.mu.Unlock()
	for _, g := range grpcs {
		g.Stop()
	}
}

// ClusterConfig says where a cluster's members live.
type ClusterConfig struct {
	// Dirs are the members' data directories (created), one a member: as many members as Dirs (3 for a
	// cluster that keeps a quorum with one member stopped).
	Dirs []string
	// Host is the address the members listen on and advertise (127.0.0.1 when empty); each has its own
	// free pair of ports.
	Host string
	// LogLevel is the members' (see Config).
	LogLevel string
}

// Cluster is a cluster of members in this process (named m1, m2, …), each of which can be stopped and
// started again on its data directory and ports.
type Cluster struct {
	initial string   // the initial cluster: every member's name and peer URL
	cfgs    []Config // the members' resolved settings
	mu      sync.Mutex
	servers []*Server // the running members (nil: stopped)
}

// StartCluster starts the members and waits until each serves (or ctx ends: then it stops them).
func StartCluster(ctx context.Context, cfg ClusterConfig) (*Cluster, error) {
	if len(cfg.Dirs) == 0 {
		return nil, errors.New("start etcd cluster: no data directories")
	}
	c := &Cluster{servers: make([]*Server, len(cfg.Dirs))}
	var peers []string
	for i, dir := range cfg.Dirs {
		m := Config{Dir: dir, Name: "m" + strconv.Itoa(i+1), Host: cfg.Host, LogLevel: cfg.LogLevel}
		if err := m.resolve(); err != nil {
			return nil, fmt.Errorf("start etcd cluster: %w", err)
		}
		c.cfgs = append(c.cfgs, m)
		peer := m.peerURL()
		peers = append(peers, m.Name+"="+peer.String())
	}
	c.initial = strings.Join(peers, ",")
	// Every member is launched before any is waited for: a member serves once the cluster has a quorum.
	for i, m := range c.cfgs {
		s, err := m.launch(c.initial)
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("start etcd cluster: %w", err)
		}
		c.servers[i] = s
	}
	for i, s := range c.servers {
		if err := s.wait(ctx, c.cfgs[i].Dir); err != nil {
			c.Close()
			return nil, fmt.Errorf("start etcd cluster: %w", err)
		}
	}
	return c, nil
}

// Size is the number of members (running or stopped).
func (c *Cluster) Size() int { return len(c.cfgs) }

// Endpoints are the members' client URLs, in the members' order.
func (c *Cluster) Endpoints() []string {
	eps := make([]string, len(c.cfgs))
	for i, m := range c.cfgs {
		u := m.clientURL()
		eps[i] = u.String()
	}
	return eps
}

// Client is a new client naming every member's endpoint (the caller closes it): it goes on through
// another member when one stops.
func (c *Cluster) Client() (*clientv3.Client, error) { return newClient(c.Endpoints()) }

// MemberClient is a new client of member i alone (the caller closes it): its requests, reads too, are
// served by that member; while it is stopped they wait for it (up to their deadline).
func (c *Cluster) MemberClient(i int) (*clientv3.Client, error) {
	return newClient(c.Endpoints()[i : i+1])
}

// Stop stops member i (nothing when it is stopped): its clients' connections are cut at once, as the
// member's crash would (requests under way fail, their outcome unknown to their clients); its data is
// closed in order (a restart finds what it committed).
func (c *Cluster) Stop(i int) {
	c.mu.Lock()
	s := c.servers[i]
	c.servers[i] = nil
	c.mu.Unlock()
	if s != nil {
		s.cut()
		s.Stop()
	}
}

// Restart starts member i again on its data directory and ports, and waits until it serves (it rejoins
// the cluster as the member it was). It is an error while the member runs.
func (c *Cluster) Restart(ctx context.Context, i int) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.servers[i] != nil {
		return fmt.Errorf("restart etcd member %s: it is running", c.cfgs[i].Name)
	}
	s, err := c.cfgs[i].launch(c.initial)
	if err != nil {
		return fmt.Errorf("restart etcd member %s: %w", c.cfgs[i].Name, err)
	}
	if err := s.wait(ctx, c.cfgs[i].Dir); err != nil {
		return fmt.Errorf("restart etcd member %s: %w", c.cfgs[i].Name, err)
	}
	c.servers[i] = s
	return nil
}

// Leader is the index of the member the running members know as the leader (-1: none known).
func (c *Cluster) Leader() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, s := range c.servers {
		if s == nil {
			continue
		}
		lead := s.etcd.Server.Leader()
		for j, t := range c.servers {
			if t != nil && t.etcd.Server.MemberID() == lead {
				return j
			}
		}
	}
	return -1
}

// Close stops every member.
func (c *Cluster) Close() {
	for i := range c.servers {
		c.Stop(i)
	}
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
