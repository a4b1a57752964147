package cmd

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/theappliance/appliance/appliance"
	"github.com/theappliance/appliance/appliance/certs"
	"github.com/theappliance/appliance/appliance/cluster"
	"github.com/theappliance/appliance/appliance/moves"
	"github.com/theappliance/appliance/appliance/node"
	"github.com/theappliance/appliance/scheduler"
	"github.com/theappliance/appliance/store"
)

func init() { root.AddCommand(newClusterCmd()) }

// newClusterCmd is the cluster command tree. Each command runs on a node's machine as root (or the data
// directory's owner): init on a stopped single-node appliance's data directory; the others talk to the
// cluster's metadata store through the running node's etcd member, with the node's certificate.
func newClusterCmd() *cobra.Command {
	cl := &cobra.Command{Use: "cluster", Short: "Form a cluster of appliances on embedded etcd, and manage its nodes (as root on a node)"}
	dataDirFlag := func(c *cobra.Command, p *string) {
		c.Flags().StringVar(p, "data-dir", envDefault("APPLIANCE_DATA_DIR", node.Defaults().DataDir), "data directory (APPLIANCE_DATA_DIR)")
	}

	var initDir, advertise string
	var clientPort, peerPort, joinPort int
	initCmd := &cobra.Command{
		Use:   "init",
		Short: "Make this (stopped) single-node appliance the first node of a cluster",
		Long: `Convert a stopped single-node appliance's data directory into the first node of a cluster: an embedded
etcd member (client and peer traffic over mutual TLS with certificates of the appliance's CA) takes every
record of meta.db, verified record by record; cluster.json records the node; meta.db is kept aside as
meta.db.pre-cluster. An appliance that has no recovery key yet (it never ran with --backup-store) gets
one, shown once: the key of the metadata snapshots in the bucket, which every node that joins is handed.
Then start it with appliance up as before, and add nodes with appliance cluster join-token and, on the
other machine, appliance up --join TOKEN --advertise HOST.`,
		Example: `  sudo appliance cluster init --data-dir /var/lib/appliance --advertise 10.0.0.5`,
		Args:    cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := checkDataDirOwner(initDir, "cluster init"); err != nil {
				return err
			}
			_, err := cluster.Init(c.Context(), cluster.InitOptions{DataDir: initDir, Advertise: advertise, ClientPort: clientPort, PeerPort: peerPort, JoinPort: joinPort}, c.OutOrStdout())
			return err
		},
	}
	dataDirFlag(initCmd, &initDir)
	initCmd.Flags().StringVar(&advertise, "advertise", "", "the address of this machine the other nodes reach it at (required), e.g. 10.0.0.5")
	initCmd.Flags().IntVar(&clientPort, "etcd-client-port", cluster.DefaultClientPort, "the port of the etcd member's clients, on --advertise (0: a free one)")
	initCmd.Flags().IntVar(&peerPort, "etcd-peer-port", cluster.DefaultPeerPort, "the port of the etcd member's peers, on --advertise (0: a free one)")
	initCmd.Flags().IntVar(&joinPort, "join-port", cluster.DefaultJoinPort, "the port where other nodes join, on --advertise (0: a free one)")
	cl.AddCommand(initCmd)

	var tokDir string
	var ttl time.Duration
	tok := &cobra.Command{
		Use:   "join-token",
		Short: "Print a token that lets one more machine join the cluster (single use, expiring)",
		Long: `Print a join token: it names this node's join listener, the fingerprint of the cluster's CA (the joining
machine trusts no other) and a secret (stored hashed). It is good for one join before --ttl ends. On the
new machine: appliance up --join TOKEN --advertise ITS-ADDRESS --data-dir NEW-DIR.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withCluster(c.Context(), tokDir, func(cl *clusterConn) error {
				ca, err := certs.LoadOrCreateCA(filepath.Join(cl.dataDir, "ca"))
				if err != nil {
					return err
				}
				t, exp, err := cluster.NewJoinToken(cl.db, cl.cfg, ca, ttl)
				if err != nil {
					return err
				}
				fmt.Fprintf(c.ErrOrStderr(), "join token (single use, expires %s):\n", exp.Format(time.RFC3339))
				fmt.Fprintln(c.OutOrStdout(), t)
				return nil
			})
		},
	}
	dataDirFlag(tok, &tokDir)
	tok.Flags().DurationVar(&ttl, "ttl", time.Hour, "how long the token is good for")
	cl.AddCommand(tok)

	var nodesDir string
	var asJSON bool
	nodes := &cobra.Command{
		Use:   "nodes",
		Short: "List the cluster's nodes: state, liveness, capacity, projects",
		Args:  cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return withCluster(c.Context(), nodesDir, func(cl *clusterConn) error {
				mem, err := planMemory(cl.db)
				if err != nil {
					return err
				}
				list, err := cluster.Nodes(c.Context(), cl.client, cl.db, mem)
				if err != nil {
					return err
				}
				if asJSON {
					enc := json.NewEncoder(c.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(list)
				}
				w := tabwriter.NewWriter(c.OutOrStdout(), 2, 4, 2, ' ', 0)
				fmt.Fprintln(w, "ID\tADVERTISE\tSTATE\tLIVENESS\tROLE\tMEMORY FREE\tDISK FREE\tPORTS FREE\tPROJECTS\tHEARTBEAT\tVERSION\tJOINED\tSEEN")
				for _, n := range list {
					self, role, beat := "", n.Role, "-"
					if n.ID == cl.cfg.NodeID {
						self = " (this)"
					}
					if n.Leader {
						role += " (leader)"
					}
					if n.HeartbeatAgeSeconds != nil {
						beat = fmt.Sprintf("%ds ago", *n.HeartbeatAgeSeconds)
					}
					fmt.Fprintf(w, "%s%s\t%s\t%s\t%s\t%s\t%s/%s\t%s/%s\t%d/%d\t%d\t%s\t%s\t%s\t%s\n", n.ID, self, n.Advertise, n.State, n.Liveness, role,
						gib(n.MemoryFreeBytes), gib(n.MemoryBytes), gib(n.DiskFreeBytes), gib(n.DiskBytes), n.PortsFree, n.PortsLast-n.PortsFirst+1,
						len(n.Projects), beat, n.Version, n.JoinedAt.Format(time.RFC3339), n.LastSeenAt.Format(time.RFC3339))
				}
				return w.Flush()
			})
		},
	}
	dataDirFlag(nodes, &nodesDir)
	nodes.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cl.AddCommand(nodes)

	var rmDir string
	rm := &cobra.Command{
		Use:   "remove-node ID",
		Short: "Drain a node (move each of its projects to another node) and remove it (its etcd member and its record)",
		Long: `Remove a node from the cluster. Its projects move first, one at a time, each to the node placement
picks among the others (as POST /v1/projects/{id}/move does: through the off-machine backup store, with a
short write pause; the node keeps each moved directory aside). A project that cannot move (not active, no
backup store or no base backup, no room elsewhere) stops the drain before anything moves, and nothing is
removed; a move that fails stops it too. Run it on another node while the node to remove runs.`,
		Args: cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return withCluster(c.Context(), rmDir, func(cl *clusterConn) error {
				if err := drainNode(c, cl, args[0]); err != nil {
					return err
				}
				n, err := cluster.RemoveNode(c.Context(), cl.client, cl.db, cl.cfg.NodeID, args[0])
				if err != nil {
					return err
				}
				fmt.Fprintf(c.OutOrStdout(), "removed node %s (%s) and its etcd member %s\n", n.ID, n.Advertise, n.Name)
				return nil
			})
		},
	}
	dataDirFlag(rm, &rmDir)
	cl.AddCommand(rm)
	return cl
}

// clusterConn is a connection of the cluster CLI to the cluster's store, through the node's member.
type clusterConn struct {
	dataDir string
	cfg     *cluster.Config
	client  *clientv3.Client
	db      *store.DB
}

// withCluster runs fn with the store of the cluster the data directory's node belongs to (the node must
// be running: its etcd member answers).
func withCluster(ctx context.Context, dataDir string, fn func(*clusterConn) error) error {
	if err := checkDataDirOwner(dataDir, "the cluster commands"); err != nil {
		return err
	}
	dataDir, err := filepath.Abs(dataDir)
	if err != nil {
		return err
	}
	if !cluster.IsNode(dataDir) {
		return fmt.Errorf("%s is not a cluster node's data directory (no %s): form a cluster with appliance cluster init", dataDir, filepath.Base(cluster.File(dataDir)))
	}
	c, cfg, err := cluster.Dial(dataDir)
	if err != nil {
		return err
	}
	defer c.Close()
	db, err := cluster.OpenStore(c)
	if err != nil {
		return fmt.Errorf("%w (is this node's appliance running? its etcd member serves %s)", err, strings.TrimPrefix(cfg.ClientURL(), "https://"))
	}
	defer db.Close()
	return fn(&clusterConn{dataDir: dataDir, cfg: cfg, client: c, db: db})
}

// planMemory is a plan's memory as the store's plans say (the default plan's for a plan it lacks), which
// placement counts a project as reserving of its node.
func planMemory(db *store.DB) (func(plan string) int64, error) {
	mem := map[string]int64{}
	err := db.View(func(tx *store.Tx) error {
		plans, err := store.Plans.All(tx, nil)
		for _, p := range plans {
			mem[p.Name] = p.MemoryBytes
		}
		return err
	})
	return func(plan string) int64 {
		if m, ok := mem[plan]; ok {
			return m
		}
		return mem[appliance.DefaultPlan]
	}, err
}

func gib(b int64) string { return fmt.Sprintf("%.1fG", float64(b)/(1<<30)) }

// drainNode moves the projects of node id to the other nodes (a cluster.drain job, which a running node
// claims) and waits for it; nothing when it hosts none.
func drainNode(c *cobra.Command, cl *clusterConn, id string) error {
	if id == cl.cfg.NodeID {
		return fmt.Errorf("node %s is this one: remove it from another node", id)
	}
	var j *store.Job
	var n int
	err := cl.db.Update(func(tx *store.Tx) error {
		if _, err := store.Nodes.Get(tx, id); err != nil {
			return fmt.Errorf("no node %s in this cluster (appliance cluster nodes lists them)", id)
		}
		prjs, err := moves.NodeProjects(tx, id)
		if err != nil || len(prjs) == 0 {
			return err
		}
		n = len(prjs)
		j, err = moves.EnqueueDrain(tx, id)
		return err
	})
	if err != nil || j == nil {
		return err
	}
	fmt.Fprintf(c.ErrOrStderr(), "draining node %s: moving its %d project(s) to the other nodes (job %s)\n", id, n, j.ID)
	for {
		select {
		case <-c.Context().Done():
			return fmt.Errorf("%w: the drain (job %s) goes on without this command; nothing was removed", c.Context().Err(), j.ID)
		case <-time.After(500 * time.Millisecond):
		}
		var cur *store.Job
		if err := cl.db.View(func(tx *store.Tx) error {
			var err error
			cur, err = store.Jobs.Get(tx, j.ID)
			return err
		}); err != nil {
			return fmt.Errorf("read the drain job %s: %w", j.ID, err)
		}
		switch cur.State {
		case scheduler.StateCompleted:
			var res moves.DrainResult
			_ = json.Unmarshal(cur.Result, &res)
			for _, m := range res.Moved {
				fmt.Fprintf(c.ErrOrStderr(), "moved a project to node %s (write pause %d ms, lsn %s)\n", m.To, m.WritePauseMS, m.LSN)
			}
			return nil
		case scheduler.StateFailed:
			return fmt.Errorf("node %s was not removed: %s", id, cur.Error)
		}
	}
}
