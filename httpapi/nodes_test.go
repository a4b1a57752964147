package httpapi

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/theappliance/appliance/api"
)

// TestNodesOnASingleNode: GET /v1/nodes on a single-node appliance answers that node alone, honestly: not
// clustered, no id and no etcd member, alive, every project its own, its capacity with what placement
// counts free of it (the free plan's memory, the project's storage limit and two ports per project). It
// is refused to a non-operator's session and to an admin key (403), and without credentials (401).
func TestNodesOnASingleNode(t *testing.T) {
	t.Parallel()
	b := setup(t)
	added, err := b.svc.Tenancy().AddOperator(t.Context(), &api.AddOperatorRequest{Email: "ops@example.com", Name: "Olga"})
	if err != nil {
		t.Fatal(err)
	}
	r := b.do("POST", "/v1/auth/sessions", "", map[string]any{"email": "ops@example.com", "password": added.Password})
	if r.status != http.StatusCreated {
		t.Fatalf("operator sign-in: %d %s", r.status, r.body)
	}
	op := r.json["token"].(string)
	for _, cred := range []string{b.session("owner"), b.adminKey} {
		if r := b.do("GET", "/v1/nodes", cred, nil); r.status != http.StatusForbidden {
			t.Fatalf("GET /v1/nodes by a non-operator: %d %s", r.status, r.body)
		}
	}
	if r := b.do("GET", "/v1/nodes", "", nil); r.status != http.StatusUnauthorized {
		t.Fatalf("GET /v1/nodes without credentials: %d %s", r.status, r.body)
	}

	list := func() api.NodeList {
		t.Helper()
		r := b.do("GET", "/v1/nodes", op, nil)
		var l api.NodeList
		if r.status != http.StatusOK || json.Unmarshal([]byte(r.body), &l) != nil {
			t.Fatalf("GET /v1/nodes: %d %s", r.status, r.body)
		}
		return l
	}
	empty := list()
	if empty.Clustered || empty.Node != "" || len(empty.Nodes) != 1 {
		t.Fatalf("a single node's list: %+v", empty)
	}
	n := empty.Nodes[0]
	ports := b.svc.Config().Ports
	if n.ID != "" || n.Status != api.NodeStatusAlive || n.Role != api.NodeRoleNone || n.Leader || n.State != "active" ||
		n.MemoryBytes <= 0 || n.DiskBytes <= 0 || n.PortsFirst != ports.First || n.PortsLast != ports.Last ||
		n.PortsFree != ports.Last-ports.First+1 || n.MemoryFreeBytes != n.MemoryBytes || n.DiskFreeBytes != n.DiskBytes ||
		len(n.Projects) != 0 || n.LeaseTTLSeconds != nil || n.HeartbeatAgeSeconds != nil {
		t.Fatalf("the node with no project: %+v", n)
	}

	prj := b.project("hosted", "development")
	free, ok := b.svc.Tenancy().Plan("free")
	if !ok {
		t.Fatal("no free plan")
	}
	n = list().Nodes[0]
	if !slices.Equal(n.Projects, []string{prj.ID}) || n.PortsFree != ports.Last-ports.First+1-2 ||
		n.MemoryFreeBytes != n.MemoryBytes-free.MemoryBytes || n.DiskFreeBytes != n.DiskBytes-prj.StorageLimitBytes {
		t.Fatalf("the node with one project (free plan, %d bytes of memory): %+v", free.MemoryBytes, n)
	}
}
