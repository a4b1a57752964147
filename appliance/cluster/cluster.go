// Package cluster makes appliances a cluster on embedded etcd (issue 35): `appliance cluster init`
// converts a stopped single-node appliance's data directory (its bbolt metadata copied into a new etcd
// member, verified record by record), join tokens let another machine's appliance join (`up --join`), and
// each node's up starts its etcd member and opens the shared metadata store on it.
//
// A data directory is a cluster node's when it holds cluster.json (File); then:
//
//	cluster.json        the node's id, its etcd member's name, the host it advertises and its ports
//	etcd/member/        the etcd member's data
//	etcd/node.crt, .key the node's certificate of the appliance CA (server and client authentication):
//	                    its member serves its clients and peers with it (mutual TLS) and dials its peers
//	                    with it; the join listener serves it; the cluster CLI connects with it
//	ca/, secret.key     the cluster's CA and sealing key: the same on every node (a joining node is given them)
//	meta.db.pre-cluster the bbolt file the node ran on before `cluster init` (kept aside, not read)
//
// Every node's metadata is the one store under Prefix of the etcd cluster. Liveness of the nodes (leases)
// and the election of a leader are package lease's.
package cluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/theappliance/appliance/store"
	"github.com/theappliance/appliance/store/etcdembed"
)

// Prefix is the key prefix of the metadata store in the cluster's etcd.
const Prefix = "/appliance/meta/"

// LeasePrefix is where the nodes' liveness keys and the leader election are (appliance/cluster/lease).
const LeasePrefix = "/appliance/"

// Default ports of a node's etcd member (client, peer) and of its join listener.
const (
	DefaultClientPort = 2379
	DefaultPeerPort   = 2380
	DefaultJoinPort   = 2381
)

// MaxClockSkew is how far a joining node's clock may be from the node it joins through: etcd's leases
// (liveness) and the tokens' expiry compare times across nodes.
const MaxClockSkew = 30 * time.Second

// Config is a node's cluster.json.
type Config struct {
	NodeID     string `json:"node_id"`
	MemberName string `json:"member_name"` // its etcd member's name
	Advertise  string `json:"advertise"`   // the host the other nodes reach it at; its member listens there
	ClientPort int    `json:"client_port"`
	PeerPort   int    `json:"peer_port"`
	JoinPort   int    `json:"join_port"`
	// InitialCluster and ClusterState are what the member was first started with: "new" and itself
	// (cluster init), or "existing" and the members the node joined (read by etcd only while its data
	// directory holds no member yet).
	InitialCluster string `json:"initial_cluster"`
	ClusterState   string `json:"cluster_state"`
	// FormedBy is the node that formed the cluster (cluster init).
	FormedBy  string    `json:"formed_by"`
	CreatedAt time.Time `json:"created_at"`
}

// File is a data directory's cluster.json.
func File(dataDir string) string { return filepath.Join(dataDir, "cluster.json") }

// PreClusterMetaFile is where cluster init keeps the bbolt file it copied.
func PreClusterMetaFile(dataDir string) string { return filepath.Join(dataDir, "meta.db.pre-cluster") }

func memberDir(dataDir string) string { return filepath.Join(dataDir, "etcd", "member") }
func certFile(dataDir string) string  { return filepath.Join(dataDir, "etcd", "node.crt") }
func keyFile(dataDir string) string   { return filepath.Join(dataDir, "etcd", "node.key") }
func caFile(dataDir string) string    { return filepath.Join(dataDir, "ca", "ca.crt") }

// IsNode says whether the data directory is a cluster node's (it holds cluster.json).
func IsNode(dataDir string) bool {
	_, err := os.Stat(File(dataDir))
	return err == nil
}

// Load reads the data directory's cluster.json.
func Load(dataDir string) (*Config, error) {
	b, err := os.ReadFile(File(dataDir))
	if err != nil {
		return nil, fmt.Errorf("read the cluster configuration: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("read the cluster configuration %s: %w", File(dataDir), err)
	}
	if c.NodeID == "" || c.MemberName == "" || c.Advertise == "" || c.ClientPort == 0 || c.PeerPort == 0 {
		return nil, fmt.Errorf("the cluster configuration %s is incomplete", File(dataDir))
	}
	return &c, nil
}

// save writes cluster.json (mode 0600) atomically.
func (c *Config) save(dataDir string) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(File(dataDir), append(b, '\n'), 0o600)
}

func writeFileAtomic(path string, b []byte, mode os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	_, werr := f.Write(b)
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		os.Remove(tmp)
		return err
	}
	return os.Rename(tmp, path)
}

func (c *Config) memberConfig(dataDir string) etcdembed.Config {
	return etcdembed.Config{
		Dir: memberDir(dataDir), Name: c.MemberName, Host: c.Advertise, ClientPort: c.ClientPort, PeerPort: c.PeerPort,
		TLS: &etcdembed.TLSFiles{CertFile: certFile(dataDir), KeyFile: keyFile(dataDir), CAFile: caFile(dataDir),
			CRLFile: crlFile(dataDir)},
		InitialCluster: c.InitialCluster, ClusterState: c.ClusterState, LogLevel: "error",
	}
}

// ClientURL is the node's etcd client URL.
func (c *Config) ClientURL() string {
	return "https://" + net.JoinHostPort(c.Advertise, strconv.Itoa(c.ClientPort))
}

// PeerURL is the node's etcd peer URL.
func (c *Config) PeerURL() string {
	return "https://" + net.JoinHostPort(c.Advertise, strconv.Itoa(c.PeerPort))
}

// JoinURL is where the node serves joins.
func (c *Config) JoinURL() string {
	return "https://" + net.JoinHostPort(c.Advertise, strconv.Itoa(c.JoinPort))
}

// clientTLS is the TLS of a client of the cluster's etcd from this data directory: the node's
// certificate, and the CA as the only root.
func clientTLS(dataDir string) (*tls.Config, error) {
	pair, err := tls.LoadX509KeyPair(certFile(dataDir), keyFile(dataDir))
	if err != nil {
		return nil, fmt.Errorf("the node's certificate: %w", err)
	}
	caPEM, err := os.ReadFile(caFile(dataDir))
	if err != nil {
		return nil, fmt.Errorf("the CA certificate: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no certificate", caFile(dataDir))
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, RootCAs: pool, MinVersion: tls.VersionTLS12}, nil
}

// Dial is a client of the cluster's etcd from a node's data directory (the cluster CLI, on a running
// node): through the node's own member, with its certificate. The caller closes it.
func Dial(dataDir string) (*clientv3.Client, *Config, error) {
	cfg, err := Load(dataDir)
	if err != nil {
		return nil, nil, err
	}
	tc, err := clientTLS(dataDir)
	if err != nil {
		return nil, nil, err
	}
	c, err := etcdembed.NewClient([]string{cfg.ClientURL()}, tc)
	if err != nil {
		return nil, nil, err
	}
	return c, cfg, nil
}

// OpenStore is the metadata store through a client of Dial's.
func OpenStore(c *clientv3.Client) (*store.DB, error) { return store.OpenEtcd(c, Prefix) }

// Member is a node's running etcd member, a client of it and the metadata store on the cluster.
type Member struct {
	cfg     *Config
	dataDir string
	srv     *etcdembed.Server
	client  *clientv3.Client
	joinLn  net.Listener // the join listener, bound before the member starts (ServeJoins serves it)
	db      *store.DB
	// stopSync ends syncRevocations, which closes synced.
	stopSync, synced chan struct{}
}

// StartMember starts the data directory's etcd member and waits until it serves (a member of several:
// until the cluster has a quorum, or ctx ends), then opens the metadata store on the cluster. A member
// that joined as a learner is promoted to a voting member once it caught up.
func StartMember(ctx context.Context, dataDir string) (_ *Member, err error) {
	cfg, err := Load(dataDir)
	if err != nil {
		return nil, err
	}
	m := &Member{cfg: cfg, dataDir: dataDir}
	defer func() {
		if err != nil {
			m.Stop()
		}
	}()
	if err := ensureCRL(dataDir); err != nil {
		return nil, err
	}
	// The join listener's port is held from here: a node that joined with a free port (0) picked it
	// moments ago, and nothing else may take it while the member starts and the node's components come
	// up before they serve it.
	if m.joinLn, err = net.Listen("tcp", net.JoinHostPort(cfg.Advertise, strconv.Itoa(cfg.JoinPort))); err != nil {
		return nil, fmt.Errorf("the join listener: %w", err)
	}
	if m.srv, err = etcdembed.Start(ctx, cfg.memberConfig(dataDir)); err != nil {
		return nil, fmt.Errorf("start this node's etcd member (%s on %s): %w", cfg.MemberName, cfg.Advertise, err)
	}
	tc, err := clientTLS(dataDir)
	if err != nil {
		return nil, err
	}
	if m.client, err = etcdembed.NewClient([]string{cfg.ClientURL()}, tc); err != nil {
		return nil, err
	}
	if err := m.promote(ctx); err != nil {
		return nil, err
	}
	if m.db, err = store.OpenEtcd(m.srv.LocalKV(m.client), Prefix); err != nil {
		return nil, err
	}
	m.db.SetNode(cfg.NodeID) // its own work looks at its projects only (store.Local)
	m.db.SetSpoolDir(dataDir)
	m.stopSync = make(chan struct{})
	m.synced = make(chan struct{})
	go func() { defer close(m.synced); m.syncRevocations(m.stopSync) }()
	return m, nil
}

// promote makes this member a voting one if it is a learner, once it caught up with the leader (etcd
// refuses the promotion until then). A learner serves no such request: it goes to the voting members.
func (m *Member) promote(ctx context.Context) error {
	srv := m.srv.Etcd().Server
	if !srv.IsLearner() {
		return nil
	}
	id := uint64(srv.MemberID())
	var voters []string
	for _, mem := range srv.Cluster().Members() {
		if !mem.IsLearner && mem.ID != srv.MemberID() {
			voters = append(voters, mem.ClientURLs...)
		}
	}
	if len(voters) == 0 {
		return fmt.Errorf("promote this node's etcd member %s: no voting member's client URL is known", m.cfg.MemberName)
	}
	tc, err := clientTLS(m.dataDir)
	if err != nil {
		return err
	}
	c, err := etcdembed.NewClient(voters, tc)
	if err != nil {
		return err
	}
	defer c.Close()
	promoted := false
	for {
		var err error
		if !promoted {
			rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			_, err = c.MemberPromote(rctx, id)
			cancel()
			promoted = err == nil
		}
		if !srv.IsLearner() { // the promotion applied here too: this member serves its clients
			return nil
		}
		wait := 500 * time.Millisecond
		if promoted {
			wait = 50 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("promote this node's etcd member %s to a voting member: %w (last: %v)", m.cfg.MemberName, ctx.Err(), err)
		case <-time.After(wait):
		}
	}
}

// DB is the metadata store on the cluster.
func (m *Member) DB() *store.DB { return m.db }

// Config is the node's cluster.json.
func (m *Member) Config() *Config { return m.cfg }

// Client is the member's client (the member's own; not to be closed).
func (m *Member) Client() *clientv3.Client { return m.client }

// Stop closes the store and the client and stops the member (what started; twice does nothing more).
func (m *Member) Stop() {
	if m.stopSync != nil {
		close(m.stopSync)
		<-m.synced
		m.stopSync = nil
	}
	if m.db != nil {
		m.db.Close()
		m.db = nil
	}
	if m.client != nil {
		m.client.Close()
		m.client = nil
	}
	if m.srv != nil {
		m.srv.Stop()
	}
	if m.joinLn != nil {
		m.joinLn.Close() // ServeJoins' server closed it already when it served it
		m.joinLn = nil
	}
}
