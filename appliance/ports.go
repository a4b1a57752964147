package appliance

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/theappliance/appliance/appliance/instances"
	"github.com/theappliance/appliance/store"
)

// PortRange is where instance ports (direct and pooled) are allocated.
type PortRange struct {
	First, Last int
}

// DefaultPortRange leaves PostgreSQL's own 5432 and the common 6432 alone.
var DefaultPortRange = PortRange{First: 15432, Last: 17431}

// ParsePortRange reads "FIRST-LAST" (1024-65535, at least two ports: an instance needs a direct and a
// pooled port).
func ParsePortRange(v string) (PortRange, error) {
	a, b, ok := strings.Cut(strings.TrimSpace(v), "-")
	first, err1 := strconv.Atoi(strings.TrimSpace(a))
	last, err2 := strconv.Atoi(strings.TrimSpace(b))
	if !ok || err1 != nil || err2 != nil || first < 1024 || last > 65535 || last <= first {
		return PortRange{}, fmt.Errorf("port range %q: want FIRST-LAST within 1024-65535, e.g. 15432-17431", v)
	}
	return PortRange{First: first, Last: last}, nil
}

// allocatePorts picks n ports of the range that no instance record holds and that can be bound now.
func (s *Service) allocatePorts(tx *store.Tx, n int) ([]int, error) {
	used := map[int]bool{}
	insts, err := store.Instances.All(tx, nil)
	if err != nil {
		return nil, err
	}
	for _, in := range insts {
		if in.State != InstanceRemoved {
			used[in.Port], used[in.PooledPort] = true, true
		}
	}
	r := s.cfg.Ports
	if r.First == 0 {
		r = DefaultPortRange
	}
	var out []int
	for p := r.First; p <= r.Last && len(out) < n; p++ {
		if used[p] || !instances.Bindable(s.cfg.ListenHost, p) {
			continue
		}
		out = append(out, p)
	}
	if len(out) < n {
		return nil, fmt.Errorf("no free port left in %d-%d", r.First, r.Last)
	}
	return out, nil
}

// Instance states.
const (
	InstanceCreating = "creating"
	InstanceRunning  = "running"
	InstanceStopped  = "stopped"
	InstanceRemoved  = "removed"
)

// movePortIfTaken handles a start that failed because another process took the port between allocation
// and bind (another appliance on the machine, say): the instance (or its pooler) gets a new port for the
// job's next attempt. It returns err, annotated when the port moved.
func (s *Service) movePortIfTaken(inst *store.Instance, pooler bool, err error) error {
	port := inst.Port
	if pooler {
		port = inst.PooledPort
	}
	if instances.Bindable(s.cfg.ListenHost, port) {
		return err // the port is free: something else went wrong
	}
	var moved int
	uerr := s.db.Update(func(tx *store.Tx) error {
		ports, err := s.allocatePorts(tx, 1)
		if err != nil {
			return err
		}
		in, err := store.Instances.Get(tx, inst.ID)
		if err != nil {
			return err
		}
		prj, err := store.Projects.Get(tx, in.ProjectID)
		if err != nil {
			return err
		}
		moved = ports[0]
		if pooler {
			in.PooledPort, prj.PooledPort = moved, moved
		} else {
			in.Port, prj.DirectPort = moved, moved
		}
		if err := store.Instances.Put(tx, in); err != nil {
			return err
		}
		return store.Projects.Put(tx, prj)
	})
	if uerr != nil {
		return fmt.Errorf("%w (port %d is taken by another process; moving it failed: %v)", err, port, uerr)
	}
	return fmt.Errorf("%w (port %d is taken by another process: the next attempt uses %d)", err, port, moved)
}
