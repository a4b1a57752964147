package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
	"github.com/theappliance/appliance/store/etcdembed"
)

// InitOptions are `appliance cluster init`'s.
type InitOptions struct {
	DataDir   string
	Advertise string // the host the other nodes will reach this one at (an address of this machine's)
	// ClientPort, PeerPort, JoinPort: the node's etcd member's and its join listener's (0: a free one,
	// chosen now and kept in cluster.json).
	ClientPort, PeerPort, JoinPort int
}

// Init converts a stopped single-node appliance's data directory into the first node of a cluster: it
// starts a new etcd member (mutual TLS with a certificate of the appliance's CA), copies every bucket of
// meta.db into it and verifies the copy record by record, registers the node, writes cluster.json, and
// renames meta.db to meta.db.pre-cluster (kept, not read again). Nothing of the data directory changes
// until the copy is verified; a failed init leaves meta.db in use and removes the member it started.
func Init(ctx context.Context, o InitOptions, out io.Writer) (*Config, error) {
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	if IsNode(dataDir) {
		return nil, fmt.Errorf("%s is already a cluster node's data directory (%s)", dataDir, File(dataDir))
	}
	metaFile := filepath.Join(dataDir, "meta.db")
	if st, err := os.Stat(metaFile); err != nil || st.Size() == 0 {
		return nil, fmt.Errorf("%s holds no metadata store (meta.db): start the appliance once (appliance up --data-dir %s), stop it, then init", dataDir, dataDir)
	}
	if err := checkAdvertise(o.Advertise); err != nil {
		return nil, err
	}
	src, err := store.Open(metaFile) // refused while the appliance runs (the file is locked)
	if err != nil {
		return nil, fmt.Errorf("%w (cluster init needs the appliance stopped)", err)
	}
	defer src.Close()
	ca, err := certs.LoadOrCreateCA(filepath.Join(dataDir, "ca"))
	if err != nil {
		return nil, fmt.Errorf("certificate authority: %w", err)
	}
	cfg := &Config{
		NodeID: ids.New("nod"), Advertise: o.Advertise, ClientPort: o.ClientPort, PeerPort: o.PeerPort, JoinPort: o.JoinPort,
		ClusterState: "new", CreatedAt: time.Now().UTC(),
	}
	cfg.MemberName = memberName(cfg.NodeID)
	cfg.FormedBy = cfg.NodeID
	if err := pickPorts(cfg); err != nil {
		return nil, err
	}
	cfg.InitialCluster = cfg.MemberName + "=" + cfg.PeerURL()
	if err := os.RemoveAll(filepath.Join(dataDir, "etcd")); err != nil { // a failed init's
		return nil, err
	}
	ok := false
	defer func() {
		if !ok {
			os.RemoveAll(filepath.Join(dataDir, "etcd"))
		}
	}()
	if err := writeNodeCert(dataDir, ca, o.Advertise); err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "starting etcd member %s on %s (client %s, peer %s)\n", cfg.MemberName, cfg.Advertise, cfg.ClientURL(), cfg.PeerURL())
	if err := ensureCRL(dataDir); err != nil {
		return nil, err
	}
	srv, err := etcdembed.Start(ctx, cfg.memberConfig(dataDir))
	if err != nil {
		return nil, err
	}
	defer srv.Stop()
	tc, err := clientTLS(dataDir)
	if err != nil {
		return nil, err
	}
	client, err := etcdembed.NewClient([]string{cfg.ClientURL()}, tc)
	if err != nil {
		return nil, err
	}
	defer client.Close()
	dst, err := store.OpenEtcd(client, Prefix)
	if err != nil {
		return nil, err
	}
	defer dst.Close()
	rep, err := store.CopyAll(dst, src)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(out, "copied %d records (%d bytes) of %d buckets from %s into etcd; verified record by record\n", rep.Records, rep.Bytes, rep.Buckets, metaFile)
	now := time.Now().UTC()
	node := &store.Node{
		ID: cfg.NodeID, Name: cfg.MemberName, Advertise: cfg.Advertise, EtcdMemberID: memberIDHex(uint64(srv.Etcd().Server.MemberID())),
		ClientURL: cfg.ClientURL(), PeerURL: cfg.PeerURL(), JoinURL: cfg.JoinURL(), State: store.NodeJoining, JoinedAt: now,
	}
	if err := dst.Update(func(tx *store.Tx) error {
		if err := tx.SetMeta(metaFormedBy, cfg.NodeID); err != nil {
			return err
		}
		return store.Nodes.Put(tx, node)
	}); err != nil {
		return nil, fmt.Errorf("register this node: %w", err)
	}
	if err := cfg.save(dataDir); err != nil {
		return nil, fmt.Errorf("write %s: %w", File(dataDir), err)
	}
	ok = true
	if err := src.Close(); err != nil {
		return nil, err
	}
	if err := os.Rename(metaFile, PreClusterMetaFile(dataDir)); err != nil {
		return nil, fmt.Errorf("keep %s aside: %w", metaFile, err)
	}
	fmt.Fprintf(out, "this data directory is now node %s of a cluster (%s); %s was kept as %s\n", cfg.NodeID, File(dataDir), metaFile, PreClusterMetaFile(dataDir))
	// The nodes that join are handed the recovery key: it exists from now on (an appliance that never ran
	// with a backup store had none).
	if err := ensureRecoveryKey(dataDir, out); err != nil {
		return nil, err
	}
	return cfg, nil
}

// metaFormedBy is the store's meta value naming the node that formed the cluster (store.ProjectNode).
const metaFormedBy = store.MetaFormedBy

// memberName is the etcd member name of a node.
func memberName(nodeID string) string { return "appliance-" + nodeID }

func memberIDHex(id uint64) string { return strconv.FormatUint(id, 16) }

// checkAdvertise refuses an advertised host that is no address of this machine's to listen on.
func checkAdvertise(host string) error {
	if host == "" {
		return errors.New("--advertise: required (the address of this machine the other nodes reach it at, e.g. 10.0.0.5)")
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return fmt.Errorf("--advertise %s: not an address this machine can listen on: %w", host, err)
	}
	return l.Close()
}

// pickPorts chooses free ports (on the advertised host) for those not given, each a different one (the
// listeners are held until all are chosen).
func pickPorts(cfg *Config) error {
	var held []net.Listener
	defer func() {
		for _, l := range held {
			l.Close()
		}
	}()
	for _, p := range []*int{&cfg.ClientPort, &cfg.PeerPort, &cfg.JoinPort} {
		if *p != 0 {
			continue
		}
		l, err := net.Listen("tcp", net.JoinHostPort(cfg.Advertise, "0"))
		if err != nil {
			return err
		}
		held = append(held, l)
		*p = l.Addr().(*net.TCPAddr).Port
	}
	return nil
}

// writeNodeCert issues the node's certificate for its advertised host (server and client auth).
func writeNodeCert(dataDir string, ca *certs.CA, host string) error {
	certPEM, keyPEM, err := ca.IssuePeer(host)
	if err != nil {
		return fmt.Errorf("issue the node's certificate: %w", err)
	}
	return writeNodeCertFiles(dataDir, certPEM, keyPEM)
}

func writeNodeCertFiles(dataDir string, certPEM, keyPEM []byte) error {
	if err := writeFileAtomic(keyFile(dataDir), keyPEM, 0o600); err != nil {
		return err
	}
	return writeFileAtomic(certFile(dataDir), certPEM, 0o644)
}
