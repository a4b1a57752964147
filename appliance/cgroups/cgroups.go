// Package cgroups holds the projects' servers to their plans' memory and CPU with Linux control groups:
// v2 where the machine has a cgroup2 hierarchy with the memory and cpu controllers usable, v1 (the memory
// and cpu controllers' hierarchies) otherwise, and nothing, with one warning, where neither is writable.
// Each instance gets a group under the appliance's own parent group (named after the appliance, so two
// appliances or parallel tests never share one), made under the cgroup the appliance itself runs in (with
// v2, in a group of its own such as its systemd service's, the appliance first moves itself into the
// group's supervisor child: SupervisorGroup).
// It only reads and writes files of the cgroup file systems: it never runs a program.
package cgroups

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
)

// ErrNotSupported is Limit's answer where no cgroup hierarchy with memory and CPU control is writable:
// callers treat it as "not held" (the warning was logged once, by Open).
var ErrNotSupported = errors.New("cgroups: memory and CPU limits are not supported here (no writable cgroup v2 or v1 memory and cpu hierarchy)")

// Version is the cgroup interface in use.
type Version string

const (
	None Version = "none"
	V1   Version = "v1"
	V2   Version = "v2"
)

// CPUPeriod is the CFS period the CPU quota is a share of, in microseconds (the kernel's default).
const CPUPeriod = 100000

// Limits are what a group is held to; zero means unlimited.
type Limits struct {
	MemoryBytes int64
	CPUCores    float64
}

// Options say where the cgroup file systems are and what the appliance's parent group is called.
type Options struct {
	// Root is where the cgroup file systems are mounted ("": /sys/fs/cgroup): a cgroup2 mount itself, or a
	// directory with the v1 controllers' mounts (memory, cpu) and perhaps a cgroup2 mount at unified/.
	Root string
	// Proc is the proc file system ("": /proc): self/cgroup says where the appliance runs, <pid>/stat
	// each process's parent.
	Proc string
	// Name is the appliance's parent group (letters, digits, '-', '_', '.'; not starting with '.').
	Name string
	Log  *slog.Logger
}

// Groups makes, limits, fills and removes the instances' groups.
type Groups struct {
	version Version
	why     string // why this version: the status line
	// parents are the appliance's parent group in each hierarchy: one for v2, memory then cpu for v1.
	parents []string
	proc    string
	log     *slog.Logger
	mu      sync.Mutex
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}$`)

// ParentName is the appliance's parent group's name for a data directory: appliance-<hash of its path>.
func ParentName(dataDir string) string {
	abs, err := filepath.Abs(dataDir)
	if err != nil {
		abs = dataDir
	}
	h := uint64(14695981039346656037) // FNV-1a
	for _, c := range []byte(abs) {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return fmt.Sprintf("appliance-%016x", h)
}

// Open finds the hierarchy to use and makes the appliance's parent group in it. It does not fail: where
// nothing is usable it logs one warning and every Limit answers ErrNotSupported.
func Open(o Options) (*Groups, error) {
	if o.Root == "" {
		o.Root = "/sys/fs/cgroup"
	}
	if o.Proc == "" {
		o.Proc = "/proc"
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if !nameRE.MatchString(o.Name) {
		return nil, fmt.Errorf("cgroups: invalid parent group name %q", o.Name)
	}
	g := &Groups{proc: o.Proc, log: o.Log}
	self, err := readSelf(filepath.Join(o.Proc, "self", "cgroup"))
	if err != nil {
		g.none(fmt.Sprintf("read the appliance's own cgroups: %v", err))
		return g, nil
	}
	v2err := g.openV2(o, self)
	if v2err == nil {
		return g, nil
	}
	v1err := g.openV1(o, self)
	if v1err == nil {
		g.why = fmt.Sprintf("cgroup v1 (memory, cpu) under %s (v2 not usable: %v)", g.parents[0], v2err)
		return g, nil
	}
	g.none(fmt.Sprintf("v2: %v; v1: %v", v2err, v1err))
	return g, nil
}

func (g *Groups) none(why string) {
	g.version, g.why, g.parents = None, "projects' memory and CPU are not held: "+why, nil
	g.log.Warn("cgroups: projects' memory and CPU limits are not enforced on this machine", "why", why)
}

// Version is the interface in use.
func (g *Groups) Version() Version { return g.version }

// Status says which interface holds the projects and where, or why none does (for doctor and the status
// page).
func (g *Groups) Status() string { return g.why }

// readSelf reads /proc/self/cgroup: controller ("" for v2) → path.
func readSelf(path string) (map[string]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[1] == "" {
			out[""] = parts[2]
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[c] = parts[2]
		}
	}
	return out, sc.Err()
}

func (g *Groups) openV2(o Options, self map[string]string) error {
	root := o.Root
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
		root = filepath.Join(o.Root, "unified")
		if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err != nil {
			return errors.New("no cgroup2 hierarchy")
		}
	}
	rel, ok := self[""]
	if !ok {
		return errors.New("the appliance is in no cgroup2 group")
	}
	own := filepath.Join(root, filepath.Clean("/"+rel))
	if own != root && filepath.Base(own) == SupervisorGroup && procsOf(filepath.Dir(own)) == "" {
		own = filepath.Dir(own) // an appliance (this one, or its unit's DelegateSubgroup) put itself there
	}
	if err := hasControllers(filepath.Join(own, "cgroup.controllers")); err != nil {
		return err
	}
	// The controllers are handed down to the parent group's children: enabled in the subtree of the group the
	// appliance runs in (after it moved itself out of it, where it has to) and of the parent, made beside.
	moved, err := g.claim(own, os.Getpid())
	if err != nil {
		return err
	}
	parent := filepath.Join(own, o.Name)
	if err := mkdir(parent); err != nil {
		return err
	}
	if err := enable(parent); err != nil {
		return err
	}
	g.version, g.parents = V2, []string{parent}
	g.why = "cgroup v2 under " + parent
	if moved {
		g.why += " (the appliance moved itself into " + filepath.Join(own, SupervisorGroup) + ")"
	}
	return nil
}

// SupervisorGroup is the group under its own that the appliance moves itself into with cgroup v2, when it
// runs in a group of its own that is not the root (a systemd service with Delegate=yes): the kernel enables
// no controller in the subtree of a group that holds processes (v2's "no internal processes" rule), so the
// appliance leaves its group to its children: <own>/supervisor (the appliance and the programs it does not
// limit) beside <own>/<parent> (the instances' groups).
const SupervisorGroup = "supervisor"

// claim enables the memory and cpu controllers in the subtree of own, the group the appliance (pid) runs
// in. Where the kernel refuses because own holds processes, and they are all the appliance's (pid and its
// descendants), it moves them into own/supervisor and enables them then (moved: true). Processes of
// others in own (a login session's shell) are an error: v2 is not usable there without a group of the
// appliance's own.
func (g *Groups) claim(own string, pid int) (moved bool, err error) {
	err = enable(own)
	if err == nil || !errors.Is(err, syscall.EBUSY) {
		return false, err
	}
	ours := map[string]bool{strconv.Itoa(pid): true}
	for _, c := range g.descendants(pid) {
		ours[strconv.Itoa(c)] = true
	}
	procs := strings.Fields(procsOf(own))
	var others []string
	for _, p := range procs {
		if !ours[p] {
			others = append(others, p)
		}
	}
	if len(others) > 0 {
		return false, fmt.Errorf("%w (%s also holds processes not the appliance's: %s; run it in a group of its own, as its systemd unit does with Delegate=yes)",
			err, own, strings.Join(others, " "))
	}
	sup := filepath.Join(own, SupervisorGroup)
	if err := mkdir(sup); err != nil {
		return false, err
	}
	// Only what is in own moves: a child already in a group of its own stays there.
	for _, p := range procs {
		if err := write(filepath.Join(sup, "cgroup.procs"), p, true); err != nil && !errors.Is(err, syscall.ESRCH) {
			return false, fmt.Errorf("cgroups: move the appliance out of %s: %w", own, err)
		}
	}
	if err := enable(own); err != nil {
		return true, err
	}
	return true, nil
}

// procsOf is the content of a v2 group's cgroup.procs ("" when it holds none, or cannot be read).
func procsOf(dir string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	return strings.TrimSpace(string(b))
}

func hasControllers(path string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	have := strings.Fields(string(b))
	for _, c := range v2Controllers {
		if !contains(have, c) {
			return fmt.Errorf("the %s controller is not available in %s", c, filepath.Dir(path))
		}
	}
	return nil
}

func enable(dir string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err != nil {
		return err
	}
	on := strings.Fields(string(b))
	var plus []string
	for _, c := range v2Controllers {
		if !contains(on, c) {
			plus = append(plus, "+"+c)
		}
	}
	if len(plus) == 0 {
		return nil
	}
	if err := write(filepath.Join(dir, "cgroup.subtree_control"), strings.Join(plus, " "), false); err != nil {
		return fmt.Errorf("enable the %s controllers in %s: %w", strings.Join(v2Controllers, " and "), dir, err)
	}
	return nil
}

// v2Controllers are the controllers the instances' groups need with cgroup v2 (a variable for the kernel
// test on machines whose memory and cpu controllers are bound to v1 hierarchies).
var v2Controllers = []string{"memory", "cpu"}

func (g *Groups) openV1(o Options, self map[string]string) error {
	var parents []string
	for _, c := range []struct{ controller, file string }{{"memory", "memory.limit_in_bytes"}, {"cpu", "cpu.cfs_quota_us"}} {
		rel, ok := self[c.controller]
		if !ok {
			return fmt.Errorf("no %s controller hierarchy", c.controller)
		}
		own := filepath.Join(o.Root, c.controller, filepath.Clean("/"+rel))
		if _, err := os.Stat(filepath.Join(own, c.file)); err != nil {
			return fmt.Errorf("the %s hierarchy: %w", c.controller, err)
		}
		parent := filepath.Join(own, o.Name)
		if err := mkdir(parent); err != nil {
			return err
		}
		parents = append(parents, parent)
	}
	g.version, g.parents = V1, parents
	return nil
}

func mkdir(dir string) error {
	if err := os.Mkdir(dir, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("cgroups: make %s: %w", dir, err)
	}
	return nil
}

// write writes one value to a cgroup file that must exist; appendTo appends (cgroup.procs, which takes
// one pid per write), else the file is truncated first.
func write(path, value string, appendTo bool) error {
	flag := os.O_WRONLY | os.O_TRUNC
	if appendTo {
		flag = os.O_WRONLY | os.O_APPEND
	}
	f, err := os.OpenFile(path, flag, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value + "\n")
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %q to %s: %w", value, path, err)
	}
	return nil
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// dirs are the group's directories (one per hierarchy), after its name is checked.
func (g *Groups) dirs(id string) ([]string, error) {
	if g == nil || g.version == None {
		return nil, ErrNotSupported
	}
	if !nameRE.MatchString(id) {
		return nil, fmt.Errorf("cgroups: invalid group name %q", id)
	}
	out := make([]string, len(g.parents))
	for i, p := range g.parents {
		out[i] = filepath.Join(p, id)
	}
	return out, nil
}

// Limit makes the group id (when it does not exist), sets its limits, and moves the process pid and all
// of its descendants into it (0: none moved; processes forked afterwards are born in it). It answers
// ErrNotSupported where no hierarchy is usable.
func (g *Groups) Limit(id string, l Limits, pid int) error {
	dirs, err := g.dirs(id)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range dirs {
		if err := mkdir(d); err != nil {
			return err
		}
	}
	if g.version == V2 {
		err = setV2(dirs[0], l)
	} else {
		err = errors.Join(setV1Memory(dirs[0], l.MemoryBytes), setV1CPU(dirs[1], l.CPUCores))
	}
	if err != nil {
		return fmt.Errorf("cgroups: limit %s: %w", id, err)
	}
	if pid > 0 {
		if err := g.move(dirs, pid); err != nil {
			return fmt.Errorf("cgroups: move the processes of %s: %w", id, err)
		}
	}
	return nil
}

func cpuQuota(cores float64) int64 {
	if cores <= 0 {
		return -1
	}
	return max(1000, int64(math.Round(cores*CPUPeriod))) // the kernel's least quota is 1 ms
}

func setV2(dir string, l Limits) error {
	mem := "max"
	if l.MemoryBytes > 0 {
		mem = strconv.FormatInt(l.MemoryBytes, 10)
	}
	if err := write(filepath.Join(dir, "memory.max"), mem, false); err != nil {
		return err
	}
	// No swap: a project held at its memory is not let to page the machine's swap instead.
	if p := filepath.Join(dir, "memory.swap.max"); exists(p) && l.MemoryBytes > 0 {
		if err := write(p, "0", false); err != nil {
			return err
		}
	}
	cpu := "max " + strconv.Itoa(CPUPeriod)
	if q := cpuQuota(l.CPUCores); q > 0 {
		cpu = fmt.Sprintf("%d %d", q, CPUPeriod)
	}
	return write(filepath.Join(dir, "cpu.max"), cpu, false)
}

func setV1Memory(dir string, bytes int64) error {
	v := "-1"
	if bytes > 0 {
		v = strconv.FormatInt(bytes, 10)
	}
	limit, memsw := filepath.Join(dir, "memory.limit_in_bytes"), filepath.Join(dir, "memory.memsw.limit_in_bytes")
	if !exists(memsw) {
		return write(limit, v, false)
	}
	// memory+swap may never be under memory: lowering writes memory first, raising memory+swap first.
	if err := write(limit, v, false); err != nil {
		if err2 := write(memsw, v, false); err2 != nil {
			return errors.Join(err, err2)
		}
		return write(limit, v, false)
	}
	return write(memsw, v, false)
}

func setV1CPU(dir string, cores float64) error {
	if err := write(filepath.Join(dir, "cpu.cfs_period_us"), strconv.Itoa(CPUPeriod), false); err != nil {
		return err
	}
	return write(filepath.Join(dir, "cpu.cfs_quota_us"), strconv.FormatInt(cpuQuota(cores), 10), false)
}

// move writes pid, then each of its descendants, to the cgroup.procs of each directory. A descendant that
// exited meanwhile is no error.
func (g *Groups) move(dirs []string, pid int) error {
	for _, d := range dirs {
		if err := write(filepath.Join(d, "cgroup.procs"), strconv.Itoa(pid), true); err != nil {
			return err
		}
	}
	for _, child := range g.descendants(pid) {
		for _, d := range dirs {
			if err := write(filepath.Join(d, "cgroup.procs"), strconv.Itoa(child), true); err != nil && !errors.Is(err, syscall.ESRCH) {
				return err
			}
		}
	}
	return nil
}

// descendants are the processes under pid, read from <proc>/<n>/stat (children first found, then theirs).
func (g *Groups) descendants(pid int) []int {
	entries, err := os.ReadDir(g.proc)
	if err != nil {
		return nil
	}
	parent := map[int][]int{}
	for _, e := range entries {
		n, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(g.proc, e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid …: comm may hold spaces and parentheses, so read after the last ')'.
		i := bytes.LastIndexByte(b, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b[i+1:]))
		if len(f) < 2 {
			continue
		}
		if pp, err := strconv.Atoi(f[1]); err == nil {
			parent[pp] = append(parent[pp], n)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range parent[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

// Read reads a group's limits back (what the kernel holds it to).
func (g *Groups) Read(id string) (Limits, error) {
	dirs, err := g.dirs(id)
	if err != nil {
		return Limits{}, err
	}
	var l Limits
	if g.version == V2 {
		mem, err := readValue(filepath.Join(dirs[0], "memory.max"))
		if err != nil {
			return l, err
		}
		if mem != "max" {
			if l.MemoryBytes, err = strconv.ParseInt(mem, 10, 64); err != nil {
				return l, err
			}
		}
		cpu, err := readValue(filepath.Join(dirs[0], "cpu.max"))
		if err != nil {
			return l, err
		}
		f := strings.Fields(cpu)
		if len(f) == 2 && f[0] != "max" {
			q, err1 := strconv.ParseInt(f[0], 10, 64)
			p, err2 := strconv.ParseInt(f[1], 10, 64)
			if err := errors.Join(err1, err2); err != nil || p == 0 {
				return l, fmt.Errorf("cgroups: read cpu.max %q: %v", cpu, err)
			}
			l.CPUCores = float64(q) / float64(p)
		}
		return l, nil
	}
	mem, err := readInt(filepath.Join(dirs[0], "memory.limit_in_bytes"))
	if err != nil {
		return l, err
	}
	if mem < math.MaxInt64/2 { // unlimited reads as a huge page-rounded number
		l.MemoryBytes = mem
	}
	q, err1 := readInt(filepath.Join(dirs[1], "cpu.cfs_quota_us"))
	p, err2 := readInt(filepath.Join(dirs[1], "cpu.cfs_period_us"))
	if err := errors.Join(err1, err2); err != nil {
		return l, err
	}
	if q > 0 && p > 0 {
		l.CPUCores = float64(q) / float64(p)
	}
	return l, nil
}

// Procs are the processes in a group (of its memory hierarchy with v1).
func (g *Groups) Procs(id string) ([]int, error) {
	dirs, err := g.dirs(id)
	if err != nil {
		return nil, err
	}
	b, err := os.ReadFile(filepath.Join(dirs[0], "cgroup.procs"))
	if err != nil {
		return nil, err
	}
	var out []int
	for _, f := range strings.Fields(string(b)) {
		n, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("cgroups: read %s: %w", dirs[0], err)
		}
		out = append(out, n)
	}
	return out, nil
}

// OOMKills is how many times the kernel killed a process of the group for its memory limit (v2:
// memory.events' oom_kill; v1: memory.oom_control's oom_kill, on kernels that count it).
func (g *Groups) OOMKills(id string) (int64, error) {
	dirs, err := g.dirs(id)
	if err != nil {
		return 0, err
	}
	file := "memory.oom_control"
	if g.version == V2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(dirs[0], file))
	if err != nil {
		return 0, err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "oom_kill" {
			return strconv.ParseInt(f[1], 10, 64)
		}
	}
	return 0, fmt.Errorf("cgroups: no oom_kill count in %s", filepath.Join(dirs[0], file))
}

func readValue(path string) (string, error) {
	b, err := os.ReadFile(path)
	return strings.TrimSpace(string(b)), err
}

func readInt(path string) (int64, error) {
	v, err := readValue(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(v, 10, 64)
}

// Remove removes the group (its processes must be gone: the instance stopped); a group that does not exist
// is no error.
func (g *Groups) Remove(id string) error {
	dirs, err := g.dirs(id)
	if err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var errs []error
	for _, d := range dirs {
		if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
			errs = append(errs, fmt.Errorf("cgroups: remove %s: %w", d, err))
		}
	}
	return errors.Join(errs...)
}

// Close removes the instances' groups that hold no process any more (the appliance stopped its servers;
// it makes them again when it adopts them), then the appliance's parent group when it is empty. A group
// that still holds processes stays.
func (g *Groups) Close() error {
	if g == nil {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range g.parents {
		entries, err := os.ReadDir(p)
		if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("cgroups: %w", err)
		}
		for _, e := range entries {
			if e.IsDir() {
				_ = syscall.Rmdir(filepath.Join(p, e.Name())) // busy: it still holds processes
			}
		}
		if err := syscall.Rmdir(p); err != nil && !errors.Is(err, syscall.ENOENT) && !errors.Is(err, syscall.EBUSY) && !errors.Is(err, syscall.ENOTEMPTY) {
			return fmt.Errorf("cgroups: remove %s: %w", p, err)
		}
	}
	return nil
}
