package cluster

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/theappliance/appliance/appliance/backup/metasnap"
	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/cluster/forward"
	"github.com/theappliance/appliance/appliance/ids"
	"github.com/theappliance/appliance/store"
)

// A join token is "aj1." and the base64url of its fields: where to join (the join listener of a node),
// the fingerprint of the cluster's CA (the joining node trusts only a server of that CA), the token's id
// and its secret (only the secret's SHA-256 is stored, with the expiry; a token is used once).
const tokenPrefix = "aj1."

type token struct {
	URL         string `json:"u"`
	Fingerprint string `json:"f"`
	ID          string `json:"i"`
	Secret      string `json:"s"`
}

func (t token) String() string {
	b, _ := json.Marshal(t)
	return tokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

func parseToken(s string) (token, error) {
	var t token
	s = strings.TrimSpace(s)
	if !strings.HasPrefix(s, tokenPrefix) {
		return t, errors.New("--join: not a join token (it starts with aj1.; make one with appliance cluster join-token on a node)")
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimPrefix(s, tokenPrefix))
	if err == nil {
		err = json.Unmarshal(b, &t)
	}
	if err != nil || t.URL == "" || len(t.Fingerprint) != 64 || t.ID == "" || t.Secret == "" {
		return t, errors.New("--join: the join token is malformed (copy it whole)")
	}
	return t, nil
}

// NewJoinToken makes a join token valid for ttl through the node of client c's data directory (its
// join listener) and stores its hash.
func NewJoinToken(db *store.DB, cfg *Config, ca *certs.CA, ttl time.Duration) (string, time.Time, error) {
	if ttl <= 0 {
		return "", time.Time{}, errors.New("--ttl: must be positive")
	}
	now := time.Now().UTC()
	t := token{URL: cfg.JoinURL(), Fingerprint: ca.Fingerprint(), ID: ids.New("jtk"), Secret: ids.Secret(32)}
	rec := &store.JoinToken{ID: t.ID, SecretHash: ids.Hash(t.Secret), CreatedAt: now, ExpiresAt: now.Add(ttl)}
	if err := db.Update(func(tx *store.Tx) error { return store.JoinTokens.Put(tx, rec) }); err != nil {
		return "", time.Time{}, fmt.Errorf("store the join token: %w", err)
	}
	return t.String(), rec.ExpiresAt, nil
}

// joinRequest is what a joining node sends (over TLS it verified by the token's fingerprint).
type joinRequest struct {
	TokenID    string    `json:"token_id"`
	Secret     string    `json:"secret"`
	Advertise  string    `json:"advertise"`
	ClientPort int       `json:"client_port"`
	PeerPort   int       `json:"peer_port"`
	JoinPort   int       `json:"join_port"`
	Time       time.Time `json:"time"` // the joining node's clock
}

// joinResponse is what it is handed: its identity, the members to start with, and the cluster's
// secrets (its CA, the sealing key, the revocation record, the recovery key sealed with a key of the
// token's secret: sealRecoveryKey) with its own certificate.
type joinResponse struct {
	NodeID         string `json:"node_id"`
	MemberName     string `json:"member_name"`
	MemberID       string `json:"member_id"`
	InitialCluster string `json:"initial_cluster"`
	FormedBy       string `json:"formed_by"`
	CACert         []byte `json:"ca_cert"`
	CAKey          []byte `json:"ca_key"`
	SecretKey      []byte `json:"secret_key"`
	Revoked        []byte `json:"revoked"`
	NodeCert       []byte `json:"node_cert"`
	NodeKey        []byte `json:"node_key"`
	RecoveryKey    []byte `json:"recovery_key_sealed"`
}

// joinError is a refusal: its status and a message for the joining node.
type joinError struct {
	status int
	msg    string
}

func (e *joinError) Error() string { return e.msg }

func refuse(status int, format string, a ...any) error {
	return &joinError{status: status, msg: fmt.Sprintf(format, a...)}
}

// JoinServer serves joins on the node's join listener (https://advertise:join port, the node's
// certificate of the CA).
type JoinServer struct {
	m       *Member
	ca      *certs.CA
	dataDir string
	log     *slog.Logger
	srv     *http.Server
	ln      net.Listener
	now     func() time.Time
	peer    atomic.Pointer[http.Handler] // the API, for requests other nodes forward (SetPeerHandler)
}

// ServeJoins serves the node's join listener (bound by StartMember).
func (m *Member) ServeJoins(ca *certs.CA, log *slog.Logger) (*JoinServer, error) {
	pair, err := tls.LoadX509KeyPair(certFile(m.dataDir), keyFile(m.dataDir))
	if err != nil {
		return nil, fmt.Errorf("the node's certificate: %w", err)
	}
	ln := m.joinLn // bound by StartMember
	if ln == nil {
		return nil, errors.New("the join listener: the member is stopped")
	}
	s := &JoinServer{m: m, ca: ca, dataDir: m.dataDir, log: log, ln: ln, now: time.Now}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /join", s.handle)
	mux.HandleFunc("/", s.forwarded)
	// A joining node has no certificate yet (it is verified by its token); another node presents its
	// own, which must be of the CA and for client authentication (IssuePeer's: a node's).
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second, ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug),
		TLSConfig: &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12,
			ClientAuth: tls.VerifyClientCertIfGiven, ClientCAs: ca.Pool()}}
	go s.srv.ServeTLS(ln, "", "")
	return s, nil
}

// Close stops the join listener.
func (s *JoinServer) Close(ctx context.Context) error {
	if s == nil {
		return nil
	}
	return s.srv.Shutdown(ctx)
}

// SetPeerHandler makes the join listener the nodes' mutual-TLS channel too: a request from another node
// (its certificate verified) that is not a join goes to h (the API), marked as a peer's (forward.WithPeer).
func (s *JoinServer) SetPeerHandler(h http.Handler) {
	if s != nil {
		s.peer.Store(&h)
	}
}

// forwarded serves a request another node forwarded: only from a client with a node's certificate.
func (s *JoinServer) forwarded(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(map[string]string{"error": "this listener serves joins (POST /join) and the cluster's nodes only"})
		return
	}
	// A removed node's certificate is still of the CA: refused by its serial (cluster remove-node).
	serial := r.TLS.PeerCertificates[0].SerialNumber.Text(16)
	var revoked bool
	if err := s.m.db.View(func(tx *store.Tx) error { revoked = store.PeerCertRevoked(tx, serial); return nil }); err != nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]string{"error": "this node cannot read the cluster's revoked certificates: " + err.Error()})
		return
	}
	if revoked {
		s.log.Warn("a removed node's certificate was refused on the nodes' channel", "serial", serial, "remote", r.RemoteAddr)
		w.WriteHeader(http.StatusForbidden)
		json.NewEncoder(w).Encode(map[string]string{"error": "this certificate belongs to a node removed from the cluster (appliance cluster remove-node): refused"})
		return
	}
	h := s.peer.Load()
	if h == nil {
		w.WriteHeader(http.StatusServiceUnavailable)
		json.NewEncoder(w).Encode(map[string]string{"error": "this node's API is not serving yet"})
		return
	}
	w.Header().Del("Content-Type")
	(*h).ServeHTTP(w, r.WithContext(forward.WithPeer(r.Context(), r.Header.Get(forward.Header))))
}

// PeerClientTLS is the TLS a node dials another's peer listener with: its certificate, the CA as the only
// root.
func PeerClientTLS(dataDir string) (*tls.Config, error) { return clientTLS(dataDir) }

func (s *JoinServer) handle(w http.ResponseWriter, r *http.Request) {
	var req joinRequest
	var resp *joinResponse
	err := json.NewDecoder(io.LimitReader(r.Body, 1<<16)).Decode(&req)
	if err != nil {
		err = refuse(http.StatusBadRequest, "the join request is not JSON: %v", err)
	} else {
		resp, err = s.join(r.Context(), req)
	}
	w.Header().Set("Content-Type", "application/json")
	if err != nil {
		status := http.StatusInternalServerError
		var je *joinError
		if errors.As(err, &je) {
			status = je.status
		}
		s.log.Warn("join refused", "advertise", req.Advertise, "token", req.TokenID, "status", status, "err", err)
		w.WriteHeader(status)
		json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
		return
	}
	s.log.Info("node joined", "node", resp.NodeID, "advertise", req.Advertise, "member", resp.MemberName)
	json.NewEncoder(w).Encode(resp)
}

// join checks the request and the token, uses the token, adds the etcd member (a learner, promoted by
// the new node once it caught up) and the node record, and hands over what the node needs. A refusal
// changes nothing.
func (s *JoinServer) join(ctx context.Context, req joinRequest) (*joinResponse, error) {
	if req.TokenID == "" || req.Secret == "" {
		return nil, refuse(http.StatusBadRequest, "the join request carries no token")
	}
	if req.Advertise == "" || strings.ContainsAny(req.Advertise, "/@ ") {
		return nil, refuse(http.StatusBadRequest, "advertise: a host (IP address or name) is required")
	}
	for _, p := range []int{req.ClientPort, req.PeerPort, req.JoinPort} {
		if p < 1 || p > 65535 {
			return nil, refuse(http.StatusBadRequest, "ports: each must be in 1-65535")
		}
	}
	now := s.now().UTC()
	if skew := req.Time.Sub(now); skew > MaxClockSkew || skew < -MaxClockSkew {
		return nil, refuse(http.StatusBadRequest, "the joining node's clock is %s off this node's (%s here, %s there; at most %s): synchronise the clocks (NTP) and join again",
			skew.Round(time.Second), now.Format(time.RFC3339), req.Time.UTC().Format(time.RFC3339), MaxClockSkew)
	}
	nc := &Config{Advertise: req.Advertise, ClientPort: req.ClientPort, PeerPort: req.PeerPort, JoinPort: req.JoinPort}
	node := &store.Node{
		ID: ids.New("nod"), Advertise: req.Advertise, ClientURL: nc.ClientURL(), PeerURL: nc.PeerURL(), JoinURL: nc.JoinURL(),
		State: store.NodeJoining, JoinedAt: now,
	}
	node.Name = memberName(node.ID)
	var formedBy string
	// The token is used in the transaction that checks it: two joins with one token, one wins.
	if err := s.m.db.Update(func(tx *store.Tx) error {
		t, err := store.JoinTokens.Get(tx, req.TokenID)
		if errors.Is(err, store.ErrNotFound) {
			return refuse(http.StatusForbidden, "the join token is unknown to this cluster")
		}
		if err != nil {
			return err
		}
		if subtle.ConstantTimeCompare([]byte(t.SecretHash), []byte(ids.Hash(req.Secret))) != 1 {
			return refuse(http.StatusForbidden, "the join token is unknown to this cluster")
		}
		if t.UsedAt != nil {
			return refuse(http.StatusForbidden, "the join token was used already (by node %s at %s): make another with appliance cluster join-token", t.UsedBy, t.UsedAt.Format(time.RFC3339))
		}
		if !now.Before(t.ExpiresAt) {
			return refuse(http.StatusForbidden, "the join token expired at %s: make another with appliance cluster join-token", t.ExpiresAt.Format(time.RFC3339))
		}
		others, err := store.Nodes.All(tx, func(n *store.Node) bool { return n.PeerURL == node.PeerURL || n.ClientURL == node.ClientURL })
		if err != nil {
			return err
		}
		if len(others) > 0 {
			return refuse(http.StatusConflict, "node %s already has the address %s: remove it first (appliance cluster remove-node %s)", others[0].ID, req.Advertise, others[0].ID)
		}
		t.UsedAt, t.UsedBy = &now, node.ID
		if err := store.JoinTokens.Put(tx, t); err != nil {
			return err
		}
		formedBy = tx.Meta(metaFormedBy)
		return store.Nodes.Put(tx, node)
	}); err != nil {
		return nil, err
	}
	undo := func() {
		s.m.db.Update(func(tx *store.Tx) error {
			if t, err := store.JoinTokens.Get(tx, req.TokenID); err == nil {
				t.UsedAt, t.UsedBy = nil, ""
				store.JoinTokens.Put(tx, t)
			}
			return store.Nodes.Delete(tx, node.ID)
		})
	}
	files, err := s.secrets()
	if err != nil {
		undo()
		return nil, err
	}
	recoveryKey, err := s.recoveryKey()
	if err != nil {
		undo()
		return nil, err
	}
	sealedKey, err := sealRecoveryKey(recoveryKey, req.TokenID, req.Secret, node.ID)
	if err != nil {
		undo()
		return nil, fmt.Errorf("seal the recovery key: %w", err)
	}
	certPEM, keyPEM, err := s.ca.IssuePeer(req.Advertise)
	if err != nil {
		undo()
		return nil, fmt.Errorf("issue the node's certificate: %w", err)
	}
	var added *clientv3.MemberAddResponse
	err = retryUnhealthy(ctx, func(ctx context.Context) error {
		var err error
		added, err = s.m.client.MemberAddAsLearner(ctx, []string{node.PeerURL})
		return err
	})
	if errors.Is(err, rpctypes.ErrTooManyLearners) {
		undo()
		return nil, refuse(http.StatusConflict, "another node joined and has not started yet (etcd takes one learner at a time): start it, or remove it (appliance cluster nodes lists it as joining; appliance cluster remove-node ID), then join again")
	}
	if err != nil {
		undo()
		return nil, refuse(http.StatusServiceUnavailable, "add the node's etcd member: %v", err)
	}
	var peers []string
	for _, mem := range added.Members {
		name := mem.Name
		if mem.ID == added.Member.ID {
			name = node.Name
		}
		if name == "" {
			continue // another member added and not yet started: it is not in the initial cluster
		}
		for _, u := range mem.PeerURLs {
			peers = append(peers, name+"="+u)
		}
	}
	node.EtcdMemberID = memberIDHex(added.Member.ID)
	if serial, err := pemSerial(certPEM); err == nil {
		node.CertSerial = serial // refused once the node is removed (also recorded by its Register)
	}
	if err := s.m.db.Update(func(tx *store.Tx) error { return store.Nodes.Put(tx, node) }); err != nil {
		s.log.Warn("record the new node's member id", "node", node.ID, "err", err)
	}
	return &joinResponse{
		NodeID: node.ID, MemberName: node.Name, MemberID: node.EtcdMemberID, InitialCluster: strings.Join(peers, ","), FormedBy: formedBy,
		CACert: files["ca/ca.crt"], CAKey: files["ca/ca.key"], SecretKey: files["secret.key"], Revoked: files["revoked"],
		NodeCert: certPEM, NodeKey: keyPEM, RecoveryKey: sealedKey,
	}, nil
}

// recoveryKey is the cluster's recovery key, which this node has (cluster init made it, or its join handed
// it). A node of a cluster formed before keys were handed at joins may have none: it makes it now, so that
// the nodes that join from now on share it (the key is not logged: appliance backup-store recovery-key
// prints it).
func (s *JoinServer) recoveryKey() ([]byte, error) {
	key, created, err := metasnap.LoadOrCreateRecoveryKey(filepath.Join(s.dataDir, RecoveryKeyFile))
	if err != nil {
		return nil, fmt.Errorf("the cluster's recovery key: %w", err)
	}
	if created {
		s.log.Warn("this node had no recovery key (its cluster was formed before the key was handed at joins): made one, which the nodes joining from now on are handed; print it with appliance backup-store recovery-key and keep it off these machines",
			"file", filepath.Join(s.dataDir, RecoveryKeyFile))
	}
	return key, nil
}

// sharedFiles are the data directory's files every node of a cluster has the same (the revocation
// record, which may be absent, is handed as it is now).
var sharedFiles = []string{"ca/ca.crt", "ca/ca.key", "secret.key", "revoked"}

func (s *JoinServer) secrets() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, f := range sharedFiles {
		b, err := os.ReadFile(filepath.Join(s.dataDir, f))
		if errors.Is(err, os.ErrNotExist) && f == "revoked" {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
		out[f] = b
	}
	return out, nil
}

// JoinOptions are `appliance up --join`'s.
type JoinOptions struct {
	DataDir, Token, Advertise      string
	ClientPort, PeerPort, JoinPort int
	// clockSkew is added to the time the request carries (tests of the skew refusal).
	clockSkew time.Duration
}

// Join makes DataDir a new node of the cluster the token names: it verifies the node it reaches by the
// CA fingerprint the token carries (and sends the token's secret to no other), asks it to add this node,
// and writes what it is handed (the CA, the sealing key, the revocation record, the recovery key, its
// certificate) and
// cluster.json. Up then starts the member (StartMember). The data directory must be new: a single-node
// appliance's cannot join (its metadata would be lost).
func Join(ctx context.Context, o JoinOptions) (*Config, error) {
	dataDir, err := filepath.Abs(o.DataDir)
	if err != nil {
		return nil, err
	}
	t, err := parseToken(o.Token)
	if err != nil {
		return nil, err
	}
	if st, err := os.Stat(filepath.Join(dataDir, "meta.db")); err == nil && st.Size() > 0 {
		return nil, fmt.Errorf("--join: %s holds a single-node appliance's metadata (meta.db): a node joins with a new, empty data directory", dataDir)
	}
	for _, f := range []string{"ca/ca.crt", "secret.key", RecoveryKeyFile} {
		if _, err := os.Stat(filepath.Join(dataDir, f)); err == nil {
			return nil, fmt.Errorf("--join: %s already holds %s: a node joins with a new, empty data directory", dataDir, f)
		}
	}
	if err := checkAdvertise(o.Advertise); err != nil {
		return nil, err
	}
	cfg := &Config{Advertise: o.Advertise, ClientPort: o.ClientPort, PeerPort: o.PeerPort, JoinPort: o.JoinPort, ClusterState: "existing", CreatedAt: time.Now().UTC()}
	if err := pickPorts(cfg); err != nil {
		return nil, err
	}
	req := joinRequest{TokenID: t.ID, Secret: t.Secret, Advertise: cfg.Advertise, ClientPort: cfg.ClientPort, PeerPort: cfg.PeerPort, JoinPort: cfg.JoinPort,
		Time: time.Now().UTC().Add(o.clockSkew)}
	resp, err := postJoin(ctx, t, req)
	if err != nil {
		return nil, err
	}
	cfg.NodeID, cfg.MemberName, cfg.InitialCluster, cfg.FormedBy = resp.NodeID, resp.MemberName, resp.InitialCluster, resp.FormedBy
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	for _, f := range []struct {
		path string
		b    []byte
		mode os.FileMode
	}{
		{"ca/ca.key", resp.CAKey, 0o600}, {"ca/ca.crt", resp.CACert, 0o644}, {"secret.key", resp.SecretKey, 0o600},
	} {
		if err := writeFileAtomic(filepath.Join(dataDir, f.path), f.b, f.mode); err != nil {
			return nil, err
		}
	}
	recoveryKey, err := openRecoveryKey(resp.RecoveryKey, t.ID, t.Secret, resp.NodeID)
	if err != nil {
		return nil, fmt.Errorf("join through %s: %w", t.URL, err)
	}
	if err := writeFileAtomic(filepath.Join(dataDir, RecoveryKeyFile), []byte(hex.EncodeToString(recoveryKey)+"\n"), 0o600); err != nil {
		return nil, err
	}
	if len(resp.Revoked) > 0 {
		if err := writeFileAtomic(filepath.Join(dataDir, "revoked"), resp.Revoked, 0o600); err != nil {
			return nil, err
		}
	}
	if err := writeNodeCertFiles(dataDir, resp.NodeCert, resp.NodeKey); err != nil {
		return nil, err
	}
	if err := cfg.save(dataDir); err != nil {
		return nil, err
	}
	return cfg, nil
}

// postJoin sends the join request to the token's node, over TLS verified by the CA's fingerprint.
func postJoin(ctx context.Context, t token, req joinRequest) (*joinResponse, error) {
	u, err := url.Parse(t.URL)
	if err != nil || u.Scheme != "https" || u.Host == "" {
		return nil, errors.New("--join: the join token is malformed (copy it whole)")
	}
	want, _ := hex.DecodeString(t.Fingerprint)
	tc := &tls.Config{
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // verified below: by the CA the token names, not the system's roots
		VerifyConnection: func(cs tls.ConnectionState) error {
			var ca *x509.Certificate
			for _, c := range cs.PeerCertificates {
				if sum := sha256.Sum256(c.Raw); bytes.Equal(sum[:], want) {
					ca = c
				}
			}
			if ca == nil || len(cs.PeerCertificates) == 0 {
				return fmt.Errorf("the node at %s is not of the cluster the join token names (its certificate chains to no CA with fingerprint %s…)", u.Host, t.Fingerprint[:16])
			}
			pool := x509.NewCertPool()
			pool.AddCert(ca)
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: pool, DNSName: u.Hostname()})
			return err
		},
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: tc}, Timeout: 60 * time.Second}
	body, _ := json.Marshal(req)
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL+"/join", bytes.NewReader(body))
	if err != nil {
		return nil, err
	}
	hreq.Header.Set("Content-Type", "application/json")
	hresp, err := client.Do(hreq)
	if err != nil {
		return nil, fmt.Errorf("join through %s: %w", t.URL, err)
	}
	defer hresp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(hresp.Body, 1<<20))
	if err != nil {
		return nil, fmt.Errorf("join through %s: %w", t.URL, err)
	}
	if hresp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		json.Unmarshal(b, &e)
		return nil, fmt.Errorf("join refused by %s (%d): %s", t.URL, hresp.StatusCode, e.Error)
	}
	var resp joinResponse
	if err := json.Unmarshal(b, &resp); err != nil {
		return nil, fmt.Errorf("join through %s: the answer is not JSON: %w", t.URL, err)
	}
	if resp.NodeID == "" || resp.InitialCluster == "" || len(resp.CACert) == 0 || len(resp.CAKey) == 0 || len(resp.SecretKey) != 32 || len(resp.NodeCert) == 0 {
		return nil, fmt.Errorf("join through %s: the answer is incomplete", t.URL)
	}
	return &resp, nil
}
