// Package etcdembed runs an etcd member inside the process (go.etcd.io/etcd/server/v3/embed) and hands out
// clients of it: the metadata store's etcd backend in the store's tests now, the appliances of a cluster
// later. Start makes a single-member cluster on loopback ports (a free pair unless given).
package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
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
}

// Server is a running member.
type Server struct {
	etcd      *embed.Etcd
	ClientURL string
	stopOnce  sync.Once
}

// Start starts the member and waits until it serves (or ctx ends).
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if cfg.Dir == "" {
		return nil, errors.New("start etcd: no data directory")
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
				return nil, fmt.Errorf("start etcd: %w", err)
			}
		}
	}
	client := url.URL{Scheme: "http", Host: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.ClientPort))}
	peer := url.URL{Scheme: "http", Host: net.JoinHostPort(cfg.Host, strconv.Itoa(cfg.PeerPort))}
	ec := embed.NewConfig()
	ec.Name = cfg.Name
	ec.Dir = cfg.Dir
	ec.ListenClientUrls, ec.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	ec.ListenPeerUrls, ec.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	ec.InitialCluster = cfg.Name + "=" + peer.String()
	ec.MaxRequestBytes = MaxRequestBytes
	ec.MaxTxnOps = MaxTxnOps
	ec.LogLevel = cfg.LogLevel
	if ec.LogLevel == "" {
		ec.LogLevel = "error"
	}
	e, err := embed.StartEtcd(ec)
	if err != nil {
		return nil, fmt.Errorf("start etcd in %s: %w", cfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("start etcd in %s: %w", cfg.Dir, err)
	case <-ctx.Done():
		e.Close()
		return nil, fmt.Errorf("start etcd in %s: %w", cfg.Dir, ctx.Err())
	}
	return &Server{etcd: e, ClientURL: client.String()}, nil
}

// Client is a new client of the member (the caller closes it), its send limit matching the member's.
func (s *Server) Client() (*clientv3.Client, error) {
	c, err := clientv3.New(clientv3.Config{
		Endpoints:          []string{s.ClientURL},
		DialTimeout:        10 * time.Second,
		MaxCallSendMsgSize: MaxRequestBytes + 1<<20,
	})
	if err != nil {
		return nil, fmt.Errorf("etcd client of %s: %w", s.ClientURL, err)
	}
	return c, nil
}

// Stop stops the member (once; later calls do nothing).
func (s *Server) Stop() {
	s.stopOnce.Do(s.etcd.Close)
}

func freePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
