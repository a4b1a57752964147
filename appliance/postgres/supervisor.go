package postgres

import (
	"context"
	"fmt"
	"sync"
)

// Supervisor owns the running instances: it starts, watches, restarts and stops them.
type Supervisor struct {
	bin    Binaries
	binErr error
	mu     sync.Mutex
	insts  map[string]*instanceState
}

type instanceState struct {
	healthy bool
}

// NewSupervisor resolves the binaries (an explicit bin dir may be given).
func NewSupervisor(binDir string) *Supervisor {
	b, err := FindBinaries(binDir)
	return &Supervisor{bin: b, binErr: err, insts: map[string]*instanceState{}}
}

// Health reports whether instances can run and how many are healthy.
func (s *Supervisor) Health(ctx context.Context) (status, message string) {
	if s.binErr != nil {
		return "down", s.binErr.Error()
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	healthy := 0
	for _, st := range s.insts {
		if st.healthy {
			healthy++
		}
	}
	status = "operational"
	if healthy < len(s.insts) {
		status = "degraded"
	}
	return status, fmt.Sprintf("PostgreSQL %d at %s; %d of %d instances healthy", s.bin.Major, s.bin.Dir, healthy, len(s.insts))
}
