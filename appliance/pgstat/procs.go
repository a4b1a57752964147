package pgstat

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// Procs is a reading of the processes of the machine from /proc (Linux): for each pid its parent, its
// CPU ticks and its resident set size. A sampler reads it once per sweep (ReadProcs) and then asks it the
// usage of each instance (Usage): the cost of the sweep is one pass over /proc plus, per instance, its own
// processes, so it grows with the number of processes, not with projects times processes.
type Procs struct {
	procs    map[int]procStat
	children map[int][]int
}

type procStat struct {
	ppid int
	// ticks is utime+stime+cutime+cstime: the process's CPU time and that of its children it has waited
	// for. Children that exited are in their parent's cutime/cstime, so the sum over a tree of processes
	// does not go down when a backend exits (the postmaster waits for every backend).
	ticks uint64
	rss   int64  // pages
	start uint64 // start time, clock ticks after boot: with the pid, it names one process
}

// Usage is what an instance's processes use.
type Usage struct {
	// CPUSeconds is the CPU time (user and system) of the postmaster, its descendants, and the descendants
	// that exited and were waited for: cumulative, a rate comes from the difference of two readings (a
	// restart starts it again from zero).
	CPUSeconds float64
	// MemBytes is the proportional set size (PSS, /proc/<pid>/smaps_rollup) of the postmaster and its
	// descendants summed: shared memory counts once across them, divided among the processes mapping it.
	// A process whose smaps_rollup cannot be read counts with its resident set size instead.
	MemBytes int64
}

// ReadProcs reads /proc/<pid>/stat of every process.
func ReadProcs() (*Procs, error) {
	dir, err := os.Open("/proc")
	if err != nil {
		return nil, fmt.Errorf("read processes: %w", err)
	}
	names, err := dir.Readdirnames(-1)
	dir.Close()
	if err != nil {
		return nil, fmt.Errorf("read processes: %w", err)
	}
	p := &Procs{procs: make(map[int]procStat, len(names)), children: make(map[int][]int, len(names)/4)}
	buf := make([]byte, 1024)
	for _, name := range names {
		if name == "" || name[0] < '0' || name[0] > '9' {
			continue
		}
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		stat, ok := readStat(pid, buf)
		if !ok { // gone meanwhile
			continue
		}
		p.procs[pid] = stat
		p.children[stat.ppid] = append(p.children[stat.ppid], pid)
	}
	return p, nil
}

// readStat reads and parses /proc/<pid>/stat into buf.
func readStat(pid int, buf []byte) (procStat, bool) {
	n, ok := readProcFile("/proc/"+strconv.Itoa(pid)+"/stat", buf)
	if !ok {
		return procStat{}, false
	}
	return parseStat(buf[:n])
}

// readProcFile reads the start of a /proc file into buf with one read(2): /proc/<pid>/stat and smaps_rollup
// are generated whole on the first read. It makes three system calls where os.ReadFile makes five or more
// (os.Open also tries to register the descriptor with the poller, and a read at EOF ends the reading):
// ReadProcs does this for every process of the machine.
func readProcFile(path string, buf []byte) (int, bool) {
	var fd int
	var err error
	for {
		fd, err = syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		return 0, false
	}
	defer syscall.Close(fd)
	for {
		n, err := syscall.Read(fd, buf)
		if err == syscall.EINTR {
			continue
		}
		return n, err == nil && n > 0
	}
}

// readWholeProcFile reads a /proc file to its end into buf's storage (grown as needed): files such as
// task/<pid>/children give at most a page per read(2).
func readWholeProcFile(path string, buf []byte) ([]byte, bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b := bytes.NewBuffer(buf[:0])
	if _, err := b.ReadFrom(f); err != nil {
		return nil, false
	}
	return b.Bytes(), true
}

// parseStat parses a /proc/<pid>/stat line: "pid (comm) state ppid ... utime stime cutime cstime ... rss ...".
// comm may contain spaces and parentheses: the fields start after the last ')'.
func parseStat(b []byte) (procStat, bool) {
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return procStat{}, false
	}
	// Fields after comm, numbered from 0 (state) as in proc(5) minus 3.
	const (
		fPPID   = 1
		fUtime  = 11
		fStime  = 12
		fCutime = 13
		fCstime = 14
		fStart  = 19
		fRSS    = 21
	)
	var s procStat
	field := 0
	rest := b[i+1:]
	for len(rest) > 0 && field <= fRSS {
		rest = bytes.TrimLeft(rest, " ")
		end := bytes.IndexByte(rest, ' ')
		if end < 0 {
			end = len(rest)
		}
		tok := rest[:end]
		rest = rest[end:]
		switch field {
		case fPPID:
			s.ppid = int(parseUint(tok))
		case fUtime, fStime, fCutime, fCstime:
			s.ticks += parseUint(tok)
		case fStart:
			s.start = parseUint(tok)
		case fRSS:
			s.rss = int64(parseUint(tok))
		}
		field++
	}
	return s, field > fRSS
}

// parseUint parses decimal digits (0 for anything else, e.g. a negative value).
func parseUint(b []byte) uint64 {
	var n uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	return n
}

// Usage sums the usage of the process postmasterPID and its descendants (zero when it is not running).
func (p *Procs) Usage(postmasterPID int) Usage {
	if _, ok := p.procs[postmasterPID]; !ok {
		return Usage{}
	}
	var ticks uint64
	var mem int64
	buf := make([]byte, 4096)
	page := int64(os.Getpagesize())
	stack := []int{postmasterPID}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		st := p.procs[pid]
		ticks += st.ticks
		if pss, ok := readPSS(pid, buf); ok {
			mem += pss
		} else {
			mem += st.rss * page
		}
		stack = append(stack, p.children[pid]...)
	}
	return Usage{CPUSeconds: float64(ticks) / float64(clockTicks()), MemBytes: mem}
}

// Measure reads the usage of the process postmasterPID and its descendants without scanning the whole
// of /proc: it follows /proc/<pid>/task/<pid>/children (a server's processes are all single-threaded) and
// reads each one's stat — a cost that grows with the instance's own processes, not with the machine's.
// With mem it adds their memory (Memory says which processes' PSS it reads this time, the expensive part:
// the kernel walks the process's page tables, ~0.3 ms a process); without it MemBytes is 0. Where the
// kernel has no children files it falls back to ReadProcs (and reads every process's PSS). A postmaster
// that is not running gives a zero Usage.
func Measure(postmasterPID int, mem *Memory) (Usage, error) {
	buf, kids := make([]byte, 4096), make([]byte, 0, 8192)
	if _, err := os.Stat(childrenPath(postmasterPID)); errors.Is(err, fs.ErrNotExist) {
		if _, err := os.Stat("/proc/" + strconv.Itoa(postmasterPID)); err != nil {
			return Usage{}, nil // not running
		}
		procs, err := ReadProcs() // no children files in this kernel (CONFIG_PROC_CHILDREN)
		if err != nil {
			return Usage{}, err
		}
		u := procs.Usage(postmasterPID)
		if mem == nil {
			u.MemBytes = 0
		}
		return u, nil
	}
	if mem != nil {
		mem.begin()
	}
	var ticks uint64
	var bytesUsed int64
	stack := []int{postmasterPID}
	for len(stack) > 0 {
		pid := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		st, ok := readStat(pid, buf)
		if !ok { // gone meanwhile
			continue
		}
		ticks += st.ticks
		if mem != nil {
			bytesUsed += mem.of(pid, st, buf)
		}
		list, ok := readWholeProcFile(childrenPath(pid), kids)
		if !ok {
			continue
		}
		for _, f := range bytes.Fields(list) {
			if child := int(parseUint(f)); child > 0 {
				stack = append(stack, child)
			}
		}
	}
	if mem != nil {
		mem.end()
	}
	return Usage{CPUSeconds: float64(ticks) / float64(clockTicks()), MemBytes: bytesUsed}, nil
}

// Memory carries the PSS of one server's processes from a Measure to the next, so that each call reads only
// a share of them and still gives the memory of the processes running at that moment: a process's PSS is
// read the first time a call sees it and then once every Every calls (the calls whose count plus its pid is
// a multiple of Every), and counts with its last reading in between. A pid the kernel has given to another
// process (its start time differs) is read again. With Every 0 or 1 every call reads every process. A
// process whose smaps_rollup cannot be read counts with its resident set size. Not safe for concurrent use.
type Memory struct {
	Every int
	calls uint64
	procs map[int]pssReading
	read  int // processes whose PSS the last call read
}

type pssReading struct {
	start uint64
	bytes int64
	call  uint64 // the last call that saw the process
	read  uint64 // the call that read bytes
}

// Read is how many processes the last Measure read the PSS of (the others carried their last reading).
func (m *Memory) Read() int { return m.read }

func (m *Memory) begin() {
	m.calls++
	m.read = 0
	if m.procs == nil {
		m.procs = map[int]pssReading{}
	}
}

// of is the memory of process pid (st its stat): read now, or its last reading.
func (m *Memory) of(pid int, st procStat, buf []byte) int64 {
	r, ok := m.procs[pid]
	due := !ok || r.start != st.start || m.Every <= 1 || (m.calls+uint64(pid))%uint64(m.Every) == 0
	if due {
		r.start = st.start
		if pss, ok := readPSS(pid, buf); ok {
			r.bytes = pss
		} else {
			r.bytes = st.rss * int64(os.Getpagesize())
		}
		r.read = m.calls
		m.read++
	}
	r.call = m.calls
	m.procs[pid] = r
	return r.bytes
}

// end forgets the processes the call did not see (they exited).
func (m *Memory) end() {
	for pid, r := range m.procs {
		if r.call != m.calls {
			delete(m.procs, pid)
		}
	}
}

func childrenPath(pid int) string {
	p := strconv.Itoa(pid)
	return "/proc/" + p + "/task/" + p + "/children"
}

// readPSS reads the Pss line of /proc/<pid>/smaps_rollup (Linux 4.14 and later), in bytes.
func readPSS(pid int, buf []byte) (int64, bool) {
	n, ok := readProcFile("/proc/"+strconv.Itoa(pid)+"/smaps_rollup", buf)
	if !ok {
		return 0, false
	}
	b := buf[:n]
	i := bytes.Index(b, []byte("\nPss:"))
	if i < 0 {
		return 0, false
	}
	b = b[i+len("\nPss:"):]
	if j := bytes.IndexByte(b, '\n'); j >= 0 {
		b = b[:j]
	}
	kb, ok := bytes.CutSuffix(bytes.TrimSpace(b), []byte(" kB"))
	if !ok {
		return 0, false
	}
	return int64(parseUint(bytes.TrimSpace(kb))) * 1024, true
}

// clockTicks is the unit of the CPU times in /proc (USER_HZ), from the auxiliary vector the kernel gave this
// process (AT_CLKTCK); 100, its value on the usual Linux architectures, if that cannot be read.
var clockTicks = sync.OnceValue(func() uint64 {
	const atClkTck = 17
	b, err := os.ReadFile("/proc/self/auxv")
	if err != nil {
		return 100
	}
	word := strconv.IntSize / 8 // pairs of native words
	for len(b) >= 2*word {
		var key, val uint64
		if word == 8 {
			key, val = binary.NativeEndian.Uint64(b), binary.NativeEndian.Uint64(b[8:])
		} else {
			key, val = uint64(binary.NativeEndian.Uint32(b)), uint64(binary.NativeEndian.Uint32(b[4:]))
		}
		b = b[2*word:]
		if key == atClkTck && val > 0 {
			return val
		}
		if key == 0 {
			break
		}
	}
	return 100
})

// PostmasterPID reads the postmaster's pid from the first line of <pgdata>/postmaster.pid. The file may
// outlive its postmaster (a crash): check that the process is the instance's (postgres.Instance.Status)
// before trusting it.
func PostmasterPID(pgdata string) (int, error) {
	path := filepath.Join(pgdata, "postmaster.pid")
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read postmaster pid: %w", err)
	}
	line, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil || pid <= 0 {
		return 0, fmt.Errorf("read postmaster pid: %s starts with %q, not a pid", path, line)
	}
	return pid, nil
}
