package store

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
)

// ErrOlderMetadata is wrapped by Open's error for a store file older than the one the data directory last
// ran with.
var ErrOlderMetadata = errors.New("metadata is older than the data directory")

// GenerationFile is where the generation of the store at path is recorded: beside it, path + ".generation".
// The generation is bbolt's transaction id, which every commit moves on and which lives in the file's
// own header; the copy outside the file outlives the file being replaced by an older copy (or deleted).
func GenerationFile(path string) string { return path + ".generation" }

// generationFile records the newest committed generation. It is written (20 digits and a newline, in place)
// after every commit, which bbolt made durable before: so the record is never ahead of the file. It is
// synced at Close; after a power loss it may lag the file, never lead it.
type generationFile struct {
	mu      sync.Mutex
	f       *os.File
	written uint64
	err     error
}

func openGenerationFile(path string) (*generationFile, error) {
	last, err := readGeneration(path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return &generationFile{f: f, written: last}, nil
}

// readGeneration reads a generation file (0 when there is none).
func readGeneration(path string) (uint64, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	s := strings.TrimSpace(string(b))
	if s == "" {
		return 0, nil
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("%s holds %q, not a generation: %w", path, s, err)
	}
	return n, nil
}

// note records id when it is newer than what is recorded.
func (g *generationFile) note(id uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if id <= g.written {
		return
	}
	g.write(id)
}

// reset records id even when it is older (an older file accepted on purpose).
func (g *generationFile) reset(id uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.write(id)
	if g.err != nil {
		return g.err
	}
	return g.f.Sync()
}

func (g *generationFile) write(id uint64) {
	if _, err := g.f.WriteAt([]byte(fmt.Sprintf("%020d\n", id)), 0); err != nil {
		g.err = fmt.Errorf("record the metadata generation in %s: %w", g.f.Name(), err)
		return
	}
	g.written = id
}

func (g *generationFile) close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return errors.Join(g.err, g.f.Sync(), g.f.Close())
}
