// Package forward carries an API request to the cluster node that hosts the project it acts on (issue 35:
// any node answers the API; work that must run where a project's instances live runs on their node).
//
// The hop is the nodes' mutual-TLS channel: the forwarding node dials the owning node's peer listener (its
// join listener, https://advertise:join port) with its node certificate, and verifies the other's by the
// cluster's CA; the peer listener takes a request only from a client whose certificate is a node's of that
// CA (client authentication: only IssuePeer's certificates have it). The caller's credentials travel with
// the request unchanged and the owning node authenticates them itself, so a forwarded request can do what
// the caller may and no more. A forwarded request carries Header (the forwarding node's id): a node refuses
// it from anyone but a peer (an ordinary client cannot forge it), and never forwards a forwarded request
// again, so no request loops.
package forward

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"time"

	"github.com/theappliance/appliance/store"
)

// Header marks a forwarded request: its value is the id of the node that forwarded it.
const Header = "X-Appliance-Forwarded-By"

// ClientIPHeader carries the original client's address on a forwarded request (rate limits and logs on
// the owning node count the caller, not the forwarding node).
const ClientIPHeader = "X-Appliance-Client-Ip"

type peerKey struct{}

// WithPeer marks ctx as that of a request that arrived over the peer channel from node (its certificate
// verified): the peer listener calls it, and nothing else.
func WithPeer(ctx context.Context, node string) context.Context {
	return context.WithValue(ctx, peerKey{}, node)
}

// FromPeer reports whether the request of ctx arrived over the peer channel, and from which node.
func FromPeer(ctx context.Context) (string, bool) {
	n, ok := ctx.Value(peerKey{}).(string)
	return n, ok
}

// Forwarder forwards requests to the node hosting their project.
type Forwarder struct {
	self  string
	db    *store.DB
	proxy *httputil.ReverseProxy
	log   *slog.Logger
}

// New is the forwarder of node self: tc is the node's client TLS (its certificate, the CA as the only
// root).
func New(self string, db *store.DB, tc *tls.Config, log *slog.Logger) *Forwarder {
	if log == nil {
		log = slog.Default()
	}
	f := &Forwarder{self: self, db: db, log: log}
	tr := &http.Transport{
		TLSClientConfig:       tc.Clone(),
		DialContext:           (&net.Dialer{Timeout: 5 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   5 * time.Second,
		ResponseHeaderTimeout: 0, // a forwarded request may take as long as the owning node takes (a SQL query)
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}
	f.proxy = &httputil.ReverseProxy{
		Transport:     tr,
		FlushInterval: -1, // streams (the log tail, CSV) flow through as written
		Rewrite: func(pr *httputil.ProxyRequest) {
			t := pr.In.Context().Value(targetKey{}).(*url.URL)
			pr.Out.URL.Scheme, pr.Out.URL.Host = t.Scheme, t.Host
			pr.Out.Host = pr.In.Host // the caller's Host: the owning node's same-origin check sees what the caller sent
			pr.Out.Header.Set(Header, f.self)
			pr.Out.Header.Set(ClientIPHeader, ClientIP(pr.In))
		},
		// The owning node's headers replace this node's of the same name (its security and caching
		// headers, which the owning node sets too), not add to them.
		ModifyResponse: func(resp *http.Response) error {
			if w, ok := resp.Request.Context().Value(writerKey{}).(http.ResponseWriter); ok {
				for k := range resp.Header {
					w.Header().Del(k)
				}
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			node := r.Context().Value(nodeKey{}).(string)
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the caller went away
			}
			f.log.Warn("forward to the project's node", "node", node, "method", r.Method, "path", r.URL.Path, "err", err)
			Unavailable(w, node)
		},
	}
	return f
}

type targetKey struct{}
type writerKey struct{}
type nodeKey struct{}

// Owner is the node hosting the project's instances and whether it is this one (a project unknown here
// is this node's: the handler answers it, 404 included).
func (f *Forwarder) Owner(projectID string) (node *store.Node, local bool, err error) {
	err = f.db.View(func(tx *store.Tx) error {
		p, err := store.Projects.Get(tx, projectID)
		if errors.Is(err, store.ErrNotFound) {
			local = true
			return nil
		}
		if err != nil {
			return err
		}
		id := store.ProjectNode(tx, p)
		if id == "" || id == f.self {
			local = true
			return nil
		}
		node, err = store.Nodes.Get(tx, id)
		if errors.Is(err, store.ErrNotFound) {
			node, err = &store.Node{ID: id}, nil // a removed node: it answers nothing (503 naming it)
		}
		return err
	})
	return node, local, err
}

// OwnerFor is the owner of a request's project: Owner of its projectID path value, or with nodeOf (a path
// parameter), OwnerOf the record it names.
func (f *Forwarder) OwnerFor(nodeOf string, pathValue func(string) string) (node *store.Node, local bool, err error) {
	if nodeOf != "" {
		return f.OwnerOf(nodeOf, pathValue(nodeOf))
	}
	return f.Owner(pathValue("projectID"))
}

// OwnerOf is Owner of the project of the record a signed URL names, by its path parameter: an import
// upload ("uploadID") or an export ("exportID"). A record unknown here is this node's (the handler answers
// it: a 403, as for a bad signature).
func (f *Forwarder) OwnerOf(param, id string) (node *store.Node, local bool, err error) {
	var projectID string
	err = f.db.View(func(tx *store.Tx) error {
		var err error
		switch param {
		case "uploadID":
			var u *store.Upload
			if u, err = store.Uploads.Get(tx, id); err == nil {
				projectID = u.ProjectID
			}
		case "exportID":
			var e *store.Export
			if e, err = store.Exports.Get(tx, id); err == nil {
				projectID = e.ProjectID
			}
		default:
			return fmt.Errorf("forward: no owner of a %s", param)
		}
		if errors.Is(err, store.ErrNotFound) {
			return nil
		}
		return err
	})
	if err != nil || projectID == "" {
		return nil, err == nil, err
	}
	return f.Owner(projectID)
}

// Forward sends r to node's peer listener and copies its answer (status, headers, body as it flows) to w.
// When the node does not answer, w gets a JSON 503 naming the node.
func (f *Forwarder) Forward(w http.ResponseWriter, r *http.Request, node *store.Node) {
	u, err := url.Parse(node.JoinURL)
	if err != nil || node.JoinURL == "" || u.Host == "" {
		f.log.Warn("forward to the project's node: it has no peer address", "node", node.ID, "join_url", node.JoinURL)
		Unavailable(w, node.ID)
		return
	}
	ctx := context.WithValue(context.WithValue(context.WithValue(r.Context(), targetKey{}, u), nodeKey{}, node.ID), writerKey{}, w)
	f.proxy.ServeHTTP(w, r.WithContext(ctx))
}

// Unavailable answers the JSON 503 of a project whose node does not answer.
func Unavailable(w http.ResponseWriter, node string) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Retry-After", "5")
	w.WriteHeader(http.StatusServiceUnavailable)
	json.NewEncoder(w).Encode(map[string]string{
		"error": fmt.Sprintf("the project's instances are on cluster node %s, which does not answer: try again later (appliance cluster nodes shows the nodes)", node),
		"node":  node,
	})
}

// ClientIP is the address of the request's caller: the original client's on a request forwarded by a
// peer, the connection's otherwise.
func ClientIP(r *http.Request) string {
	if _, ok := FromPeer(r.Context()); ok {
		if ip := r.Header.Get(ClientIPHeader); net.ParseIP(ip) != nil {
			return ip
		}
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
