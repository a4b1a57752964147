// Package store keeps the appliance's metadata: typed tables of JSON records with secondary indexes (a
// unique one answers who holds a key in one read, a counted one how many records a key files), in one
// bbolt file (Open: a single appliance) or under a key prefix of an etcd cluster (OpenEtcd: the appliances
// of a cluster), both through one key-value layer (backend.go). Values are always decoded out of the
// transaction, so callers never hold the backend's memory.
package store

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/debug"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// ErrNotFound is returned when a record does not exist.
var ErrNotFound = errors.New("not found")

// ErrExists is returned by Insert when a record of the ID exists.
var ErrExists = errors.New("exists already")

// SchemaVersion is the layout version written into the meta bucket. Version 2 seals every record with a
// checksum (integrity.go); a version 1 store is sealed as it opens. Version 3 adds the layout record
// (metaLayout) and the unique and counted indexes (the saved queries' names and count), which a version 2
// appliance would not maintain: it refuses a version 3 store, as every version refuses a later one. A
// version 2 store becomes version 3 as it opens (its new indexes filled).
const SchemaVersion = 3

// metaLayout is the meta key of the store's layout (layoutOf): the schema version and every bucket (table,
// index, series) the appliance that last opened it maintains. A store whose layout names a later version
// or a bucket this appliance does not know was opened by a later appliance, which may keep that bucket in
// step with its records: this one would let it drift, and refuses it (ErrNewerLayout). On etcd a node's
// every commit compares the layout with the one it opened, so a running node stops writing as soon as a
// later appliance upgrades the layout under it.
const metaLayout = "layout"

// ErrNewerLayout is wrapped by the error of a store a later appliance has upgraded: this one neither
// opens it nor, on etcd, writes to it once it changed (reads go on). The API answers it as unavailable.
var ErrNewerLayout = errors.New("the metadata was upgraded by a later version of the appliance: this one writes nothing to it (run that version here too)")

// layout is metaLayout's value.
type layout struct {
	Schema  int      `json:"schema"`
	Buckets []string `json:"buckets"`
}

// layoutOf is this appliance's layout, encoded (the buckets sorted).
func layoutOf() string {
	l := layout{Schema: SchemaVersion}
	for _, b := range allBuckets() {
		l.Buckets = append(l.Buckets, string(b))
	}
	slices.Sort(l.Buckets)
	v, _ := json.Marshal(l)
	return string(v)
}

// checkLayout refuses a stored layout (v, "" for none) a later appliance wrote.
func checkLayout(v string) error {
	if v == "" {
		return nil
	}
	var l layout
	if err := json.Unmarshal([]byte(v), &l); err != nil {
		return fmt.Errorf("%w: its layout record is unreadable (%v)", ErrNewerLayout, err)
	}
	if l.Schema > SchemaVersion {
		return fmt.Errorf("%w: schema version %d, this appliance's is %d", ErrNewerLayout, l.Schema, SchemaVersion)
	}
	known := map[string]bool{}
	for _, b := range allBuckets() {
		known[string(b)] = true
	}
	var unknown []string
	for _, b := range l.Buckets {
		if !known[b] {
			unknown = append(unknown, b)
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("%w: it keeps %s, which this appliance does not maintain", ErrNewerLayout, strings.Join(unknown, ", "))
	}
	return nil
}

var bucketMeta = []byte("meta")

// DB is the metadata store.
type DB struct {
	kv   kv       // the backend: boltKV or etcdKV
	bolt *bolt.DB // the file, on bbolt (nil on etcd)
	etcd *etcdKV  // on etcd (nil on bbolt)
	// versions counts, per table (by its number), the committed transactions that wrote it (Version).
	versions []atomic.Uint64
	gen      *generationFile // nil for a read-only store
	// unsealed: a version 1 store opened read-only (not migrated): its records have no checksums.
	unsealed bool
	// changed receives (without blocking, buffered 1) after every committed read-write transaction.
	changed chan struct{}
	// rerun: bbolt's Update runs each fn twice (RerunUpdates).
	rerun atomic.Bool
	// node is the cluster node this process is (SetNode; "" on a single node): Local's reference.
	node string
	// spoolDir is where a snapshot of the metadata on etcd is built (SetSpoolDir; "": the system's
	// temporary directory).
	spoolDir string
}

// RerunUpdates, for tests, makes every Update on a bbolt store run its fn twice: first in a transaction
// that is rolled back, then in the one that commits, as etcd runs it again after a conflict. A function
// that acts outside the transaction (I/O, appends to an outer slice, a counter moved) then shows it on
// bbolt too. It has no effect on etcd, which re-runs for real.
func (db *DB) RerunUpdates(on bool) { db.rerun.Store(on) }

// RerunUpdatesEnv is the environment variable ("1") with which the tests' helpers turn RerunUpdates on for
// every store they open.
const RerunUpdatesEnv = "APPLIANCE_TEST_RERUN_UPDATES"

// initialMmapSize is the address space the store's file is mapped into from the start. bbolt maps the file
// again each time it outgrows the mapping (doubling up to 1 GiB), and while it does, every transaction
// waits (readers included: an API request stalled for the remap in the webhook fan-out's trace). Mapped
// at 1 GiB, a store remaps only past that size; the mapping is address space, not memory (as etcd does,
// with 10 GiB).
const initialMmapSize = 1 << 30

// Options tune Open.
type Options struct {
	// AcceptOlderMetadata opens a file whose generation is below the one the data directory last ran
	// with (an older copy put back); without it, Open refuses with ErrOlderMetadata.
	AcceptOlderMetadata bool
	// ReadOnly opens the file to read (doctor's look): nothing is created, migrated or written.
	ReadOnly bool
}

// Open opens (creating if needed) the store at path with mode 0600 and creates every bucket.
func Open(path string) (*DB, error) { return OpenWith(path, Options{}) }

// OpenWith opens the store at path. Before it maps the file it checks the file's header against its size
// (a truncated file is an error, not a fault) and the file's generation against the one recorded beside it
// (GenerationFile); once open it runs bbolt's consistency check and verifies every record's checksum. Any
// of these failing is an error wrapping ErrDamaged or ErrOlderMetadata that names the file and what is wrong.
func OpenWith(path string, opts Options) (db *DB, err error) {
	var fileGen uint64
	st, statErr := os.Stat(path)
	switch {
	case statErr == nil && st.Size() > 0:
		if fileGen, err = checkFile(path); err != nil {
			return nil, fmt.Errorf("open metadata store: %w", err)
		}
	case opts.ReadOnly && statErr == nil:
		return nil, fmt.Errorf("open metadata store %s: the file is empty", path)
	case opts.ReadOnly:
		return nil, fmt.Errorf("open metadata store: %w", statErr)
	}
	last, err := readGeneration(GenerationFile(path))
	if err != nil {
		return nil, err
	}
	if last > fileGen && !opts.AcceptOlderMetadata {
		return nil, fmt.Errorf("open metadata store %s: %w: the file is at generation %d, but this data directory last ran at generation %d (%s): "+
			"an older copy was put back, or the file was replaced; start with --accept-older-metadata to use it anyway (credentials revoked since stay revoked)",
			path, ErrOlderMetadata, fileGen, last, GenerationFile(path))
	}
	// A fault reading the mapped file (a page past its end) is a panic here, not a crash; so is a panic of
	// bbolt's on a malformed page.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			if db != nil {
				db.Close()
			}
			db, err = nil, fmt.Errorf("open metadata store %s: %w: %v", path, ErrDamaged, r)
		}
	}()
	b, err := bolt.Open(path, 0o600, &bolt.Options{Timeout: 2 * time.Second, InitialMmapSize: initialMmapSize, ReadOnly: opts.ReadOnly})
	if errors.Is(err, bolt.ErrTimeout) {
		return nil, fmt.Errorf("open metadata store %s: locked by another process (is the appliance already running?)", path)
	}
	if err != nil {
		if errors.Is(err, bolt.ErrInvalid) || errors.Is(err, bolt.ErrChecksum) || errors.Is(err, bolt.ErrVersionMismatch) {
			err = fmt.Errorf("%w: %w", ErrDamaged, err)
		}
		return nil, fmt.Errorf("open metadata store %s: %w", path, err)
	}
	db = newDB(boltKV{b})
	db.bolt = b
	if err := db.bolt.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if meta != nil && string(meta.Get([]byte("schema_version"))) == "1" {
			// Its records are sealed (and checked) by the migration below; read-only, they are read as
			// they are, and only the pages are checked.
			db.unsealed = opts.ReadOnly
			return verifyPages(tx)
		}
		return verify(tx)
	}); err != nil {
		b.Close()
		return nil, fmt.Errorf("open metadata store %s: %w", path, err)
	}
	if opts.ReadOnly {
		return db, nil
	}
	if db.gen, err = openGenerationFile(GenerationFile(path)); err != nil {
		b.Close()
		return nil, err
	}
	err = db.initialise(func(tx *Tx) error {
		if err := migrateV1(tx.kv.(boltTx).tx); err != nil {
			return fmt.Errorf("seal the records of a version 1 store: %w", err)
		}
		return nil
	}, func(tx *Tx) error { return verify(tx.kv.(boltTx).tx) })
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("initialise metadata store: %w", err)
	}
	if opts.AcceptOlderMetadata && last > fileGen {
		// From now on this file's generations are the ones that count.
		if err := db.gen.reset(db.generation()); err != nil {
			db.Close()
			return nil, err
		}
	}
	return db, nil
}

func newDB(kv kv) *DB {
	return &DB{kv: kv, versions: make([]atomic.Uint64, len(registered)), changed: make(chan struct{}, 1)}
}

// initialise writes the schema version and creates the buckets missing, filling a new index with the
// records already there (in one transaction). A store at schema version 1 is migrated first by migrateV1
// and checked last by verify (nil: refused).
func (db *DB) initialise(migrateV1, verify func(*Tx) error) error {
	return db.Update(func(tx *Tx) error {
		if _, err := tx.kv.createBucket(bucketMeta); err != nil {
			return err
		}
		meta := tx.kv.bucket(bucketMeta)
		migrate := false
		if err := checkLayout(string(meta.Get([]byte(metaLayout)))); err != nil {
			return err
		}
		switch v := string(meta.Get([]byte("schema_version"))); v {
		case "", "2", fmt.Sprint(SchemaVersion):
		case "1":
			if migrateV1 == nil {
				return fmt.Errorf("metadata schema version 1 cannot be migrated on this backend")
			}
			if err := migrateV1(tx); err != nil {
				return err
			}
			migrate = true
		default:
			return fmt.Errorf("metadata schema version %s is not supported (want %d): %w", v, SchemaVersion, ErrNewerLayout)
		}
		if err := meta.Put([]byte("schema_version"), []byte(fmt.Sprint(SchemaVersion))); err != nil {
			return err
		}
		// Written only when it changes: on etcd the other nodes' commits compare it.
		if l := layoutOf(); string(meta.Get([]byte(metaLayout))) != l {
			if err := meta.Put([]byte(metaLayout), []byte(l)); err != nil {
				return err
			}
		}
		for _, name := range allBuckets() { // a table's bucket before its indexes'
			created, err := tx.kv.createBucket(name)
			if err != nil {
				return fmt.Errorf("create bucket %s: %w", name, err)
			}
			if !created {
				continue
			}
			// An index new to this store (added by a later version) files the records already there: Put
			// only changes the entries a record gains or loses.
			if fill := fillers[string(name)]; fill != nil {
				if err := fill(tx); err != nil {
					return fmt.Errorf("fill index %s: %w", name, err)
				}
			}
		}
		if migrate {
			return verify(tx)
		}
		return nil
	})
}

// signal tells the reader of Changes that a transaction committed.
func (db *DB) signal() {
	select {
	case db.changed <- struct{}{}:
	default:
	}
}

// Close closes the store: on bbolt the file (and it syncs the generation recorded beside it).
func (db *DB) Close() error {
	err := db.kv.close()
	if db.gen != nil {
		err = errors.Join(err, db.gen.close())
	}
	return err
}

// generation is the file's last committed transaction id (bbolt).
func (db *DB) generation() uint64 {
	var g uint64
	db.bolt.View(func(tx *bolt.Tx) error { g = uint64(tx.ID()); return nil })
	return g
}

// Changes receives after a read-write transaction committed; commits that follow one another before it is
// read are one receive (the channel holds at most one). It is for one reader (the metadata snapshots). On
// etcd it receives for the commits of other clients of the cluster too (from a watch, a moment later).
func (db *DB) Changes() <-chan struct{} { return db.changed }

// WriteSnapshot writes a consistent copy of the whole file to w (bbolt's Tx.WriteTo in a read transaction:
// writers are not blocked) and returns the generation it is at. A store on etcd has no file: it writes the
// file a single appliance's store would be, as of one revision (the generation; snapshot.go).
func (db *DB) WriteSnapshot(w io.Writer) (generation uint64, err error) {
	if db.etcd != nil {
		return db.writeEtcdSnapshot(w)
	}
	err = db.bolt.View(func(tx *bolt.Tx) error {
		generation = uint64(tx.ID())
		_, err := tx.WriteTo(w)
		return err
	})
	return generation, err
}

// ErrNotFile is wrapped by the errors of what only a store in a file (bbolt) can do, on a store in etcd.
var ErrNotFile = errors.New("the metadata store is not a file (etcd)")

// Path is the file the store lives in ("" on etcd).
func (db *DB) Path() string {
	if db.bolt == nil {
		return ""
	}
	return db.bolt.Path()
}

// Tx is a read or read-write transaction.
type Tx struct {
	kv    kvTx
	db    *DB
	wrote []int // the tables this transaction wrote (their numbers), each counted once on commit
	// committed: the versions its commit gave the tables it wrote, by their place in wrote (set by the
	// backend before the OnCommit functions run: CommitVersion).
	committed []uint64
}

// View runs fn in a read-only transaction, which sees one consistent state of the store.
func (db *DB) View(fn func(*Tx) error) error {
	if db.etcd != nil {
		return db.etcd.view(db, fn)
	}
	return boltKV{db.bolt}.view(db, fn)
}

// Update runs fn in a read-write transaction; an error rolls everything back. On etcd a transaction that
// conflicts with another's commit is run again (fn with it), so fn must not act outside the transaction
// (no I/O, no sends): what must follow the commit goes in OnCommit.
func (db *DB) Update(fn func(*Tx) error) error {
	if db.etcd != nil {
		return db.etcd.update(db, fn)
	}
	return boltKV{db.bolt}.update(db, fn)
}

// Version counts the committed transactions that wrote (Put or Delete) the table on db. It moves after the
// commit's data is visible and before Update returns, so a reader that loads the version, then
// reads in a new transaction, and finds the version unchanged later knows that what it read is still what
// the store holds: a cache of decoded records is valid while the versions it was read at are current.
// On etcd the version is the revision of the table's last write (it moves on by more than one): this
// store's own commits move it before Update returns, other clients' when the watch brings them (a cache
// may serve what they changed for that moment).
func (t *Table[T]) Version(db *DB) uint64 { return db.versions[t.n].Load() }

// CommitVersion, in an OnCommit function of tx, is the version tx's commit gave the table (0 when tx did
// not write it): while Version is still that, what tx wrote is what the store holds. A cache may take
// what the transaction wrote at that version (the next reader need not read it again).
func (t *Table[T]) CommitVersion(tx *Tx) uint64 {
	if i := slices.Index(tx.wrote, t.n); i >= 0 && i < len(tx.committed) {
		return tx.committed[i]
	}
	return 0
}

// touch counts the table numbered n as written once the transaction commits (the backend's update does).
func (tx *Tx) touch(n int) {
	if !slices.Contains(tx.wrote, n) {
		tx.wrote = append(tx.wrote, n)
	}
}

// Generation identifies the state the transaction works on: on bbolt its transaction id (every commit,
// even one that changed nothing, moves it on; a read-write transaction's is the one it commits as), on
// etcd the revision it reads at (every commit that wrote moves it on).
func (tx *Tx) Generation() int { return tx.kv.generation() }

// get is the value at key in bucket (nil when absent). The bbolt path is called directly so that the key's
// bytes do not escape (no allocation per read).
func (tx *Tx) get(bucket []byte, key string) []byte {
	if b, ok := tx.kv.(boltTx); ok {
		return b.tx.Bucket(bucket).Get([]byte(key))
	}
	return tx.kv.bucket(bucket).Get([]byte(key))
}

// cursor is a cursor on bucket (bbolt's called directly, as get).
func (tx *Tx) cursor(bucket []byte) cursor {
	if b, ok := tx.kv.(boltTx); ok {
		return cursor{b: b.tx.Bucket(bucket).Cursor()}
	}
	return tx.kv.bucket(bucket).Cursor()
}

// Ping proves the file can be read.
func (db *DB) Ping() error {
	return db.View(func(tx *Tx) error {
		if b, ok := tx.kv.(boltTx); ok && b.tx.Bucket(bucketMeta) == nil || tx.Meta("schema_version") == "" {
			return errors.New("meta bucket missing")
		}
		return nil
	})
}

// Meta reads a value of the meta bucket ("" when absent).
func (tx *Tx) Meta(key string) string {
	return string(tx.get(bucketMeta, key))
}

// SetMeta writes a value of the meta bucket.
func (tx *Tx) SetMeta(key, value string) error {
	return tx.kv.bucket(bucketMeta).Put([]byte(key), []byte(value))
}

// Index is a secondary index of a table: every record is filed under each key its function returns.
type Index[T any] struct {
	bucket []byte
	keys   func(*T) []string
	// unique: each key files one record, its bucket's key the index key itself and its value the record's
	// ID (Table.unique; a plain index's bucket keys are the key, sep and the ID, with no value).
	unique bool
	// counts, when set, is the bucket of how many records each key files (Index.counted): Count reads
	// one value instead of walking the entries.
	counts []byte
}

// Table is a bucket of JSON records of type T keyed by ID, with secondary indexes.
type Table[T any] struct {
	n       int // the table's number: its place in registered
	bucket  []byte
	id      func(*T) string
	indexes []*Index[T]
}

var registered [][]byte

func newTable[T any](name string, id func(*T) string) *Table[T] {
	registered = append(registered, []byte(name))
	valueBuckets = append(valueBuckets, []byte(name))
	return &Table[T]{n: len(registered) - 1, bucket: []byte(name), id: id}
}

// fillers file a table's records in one of its indexes, by the index's bucket name (made by the first
// index: tables are package variables, which may be initialised before this one would be).
var fillers map[string]func(*Tx) error

func (t *Table[T]) index(name string, keys func(*T) []string) *Index[T] {
	ix := &Index[T]{bucket: []byte(string(t.bucket) + "." + name), keys: keys}
	registered = append(registered, ix.bucket)
	t.indexes = append(t.indexes, ix)
	if fillers == nil {
		fillers = map[string]func(*Tx) error{}
	}
	fillers[string(ix.bucket)] = func(tx *Tx) error { return t.fill(tx, ix) }
	return ix
}

// fill files every record of t in ix (in a unique index, a key two records have is the first's: the
// oldest's, IDs sorting by creation).
func (t *Table[T]) fill(tx *Tx, ix *Index[T]) error {
	b := tx.kv.bucket(ix.bucket)
	held := map[string]bool{} // a unique index's keys filed (its bucket is new: empty)
	return tx.kv.bucket(t.bucket).ForEach(func(id, v []byte) error {
		rec, err := t.decode(tx, id, v)
		if err != nil {
			return err
		}
		for _, k := range ix.keys(rec) {
			if ix.unique {
				if held[k] {
					continue
				}
				held[k] = true
				if err := b.Put([]byte(k), bytes.Clone(id)); err != nil {
					return err
				}
				continue
			}
			if err := b.Put([]byte(k+sep+string(id)), nil); err != nil {
				return err
			}
		}
		return nil
	})
}

// unique is an index whose keys each file at most one record (a name unique in its project, say): its
// bucket maps the key to the record's ID. Put refuses (ErrExists) a record whose key another record
// holds; Holder reads who holds a key. An index new to a store is filled with the records there, the
// oldest first: a key two of them have (which nothing could write) is the oldest's.
func (t *Table[T]) unique(name string, keys func(*T) []string) *Index[T] {
	ix := t.index(name, keys)
	ix.unique = true
	return ix
}

// counted keeps, beside the index, how many records each key files (in a bucket of its own, filled when
// it is new to a store), so that Count reads one value rather than walking the key's entries: on etcd,
// a point read that a read-write transaction may take from what the process knows, not a range read.
func (ix *Index[T]) counted(t *Table[T]) *Index[T] {
	ix.counts = []byte(string(ix.bucket) + "#count")
	registered = append(registered, ix.counts)
	fillers[string(ix.counts)] = func(tx *Tx) error { return t.fillCounts(tx, ix) }
	return ix
}

// fillCounts counts every record of t under each of its keys in ix.
func (t *Table[T]) fillCounts(tx *Tx, ix *Index[T]) error {
	n := map[string]int{}
	if err := tx.kv.bucket(t.bucket).ForEach(func(id, v []byte) error {
		rec, err := t.decode(tx, id, v)
		if err != nil {
			return err
		}
		for _, k := range ix.keys(rec) {
			n[k]++
		}
		return nil
	}); err != nil {
		return err
	}
	b := tx.kv.bucket(ix.counts)
	for k, c := range n {
		if err := b.Put([]byte(k), []byte(strconv.Itoa(c))); err != nil {
			return err
		}
	}
	return nil
}

// addCount moves the count of key in ix's counts by d (a key counting none is deleted).
func (ix *Index[T]) addCount(tx *Tx, key string, d int) error {
	b := tx.kv.bucket(ix.counts)
	n, err := ix.count(tx, key)
	if err != nil {
		return err
	}
	if n += d; n <= 0 {
		return b.Delete([]byte(key))
	}
	return b.Put([]byte(key), []byte(strconv.Itoa(n)))
}

// count is how many records key files (ix counted).
func (ix *Index[T]) count(tx *Tx, key string) (int, error) {
	v := tx.get(ix.counts, key)
	if len(v) == 0 {
		return 0, txErr(tx)
	}
	n, err := strconv.Atoi(string(v))
	if err != nil {
		return 0, fmt.Errorf("the count of %q in %s holds %q: %w", key, ix.counts, v, err)
	}
	return n, nil
}

// txErr is the failure of an etcd transaction's reads so far (nil on bbolt, whose reads do not fail).
func txErr(tx *Tx) error {
	if e, ok := tx.kv.(*etcdTx); ok {
		return e.err
	}
	return nil
}

// Holder is the ID of the record filed under key in ix, a unique index ("" when none). It expects none (a
// name about to be taken): on etcd, the first attempt of a read-write transaction takes the key as free
// without reading it, and its commit proves it so (when another record holds it, the commit fails and
// the transaction runs again, reading it).
func (t *Table[T]) Holder(tx *Tx, ix *Index[T], key string) (string, error) {
	if !ix.unique {
		return "", fmt.Errorf("holder in %s: not a unique index", ix.bucket)
	}
	if e, ok := tx.kv.(*etcdTx); ok {
		e.assumeAbsent(ix.bucket, key)
	}
	return string(tx.get(ix.bucket, key)), txErr(tx)
}

func allBuckets() [][]byte { return registered }

const sep = "\x00"

// Get returns the record with id, or ErrNotFound.
func (t *Table[T]) Get(tx *Tx, id string) (*T, error) {
	v := tx.get(t.bucket, id)
	if v == nil {
		return nil, ErrNotFound
	}
	return t.decode(tx, []byte(id), v)
}

// decode checks a stored value's checksum and decodes its record.
func (t *Table[T]) decode(tx *Tx, id, v []byte) (*T, error) {
	payload, err := tx.unseal(t.bucket, id, v)
	if err != nil {
		return nil, err
	}
	var rec T
	if err := json.Unmarshal(payload, &rec); err != nil {
		return nil, fmt.Errorf("decode %s/%s: %w", t.bucket, id, err)
	}
	return &rec, nil
}

// Put inserts or replaces rec and keeps the indexes in step. Index entries the old record had too are
// left as they are: rewriting one would still copy its page in the transaction.
func (t *Table[T]) Put(tx *Tx, rec *T) error {
	id := t.id(rec)
	if id == "" {
		return fmt.Errorf("put %s: empty id", t.bucket)
	}
	tx.touch(t.n)
	var old *T
	if len(t.indexes) > 0 {
		var err error
		if old, err = t.Get(tx, id); err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
	}
	buf, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encode %s/%s: %w", t.bucket, id, err)
	}
	if err := tx.kv.bucket(t.bucket).Put([]byte(id), seal(buf)); err != nil {
		return fmt.Errorf("put %s/%s: %w", t.bucket, id, err)
	}
	for _, ix := range t.indexes {
		var was []string
		if old != nil {
			was = ix.keys(old)
		}
		now := ix.keys(rec)
		for _, k := range was {
			if !slices.Contains(now, k) {
				if err := ix.unfile(tx, k, id); err != nil {
					return err
				}
			}
		}
		for _, k := range now {
			if !slices.Contains(was, k) {
				if err := ix.file(tx, k, id); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// file files the record id under key k (counted, and in a unique index refused when another holds k).
func (ix *Index[T]) file(tx *Tx, k, id string) error {
	b := tx.kv.bucket(ix.bucket)
	if ix.unique {
		if e, ok := tx.kv.(*etcdTx); ok {
			e.assumeAbsent(ix.bucket, k)
		}
		if h := tx.get(ix.bucket, k); h != nil && string(h) != id {
			return fmt.Errorf("index %s: %q is %s's: %w", ix.bucket, k, h, ErrExists)
		}
		if err := txErr(tx); err != nil {
			return err
		}
		if err := b.Put([]byte(k), []byte(id)); err != nil {
			return fmt.Errorf("index %s: %w", ix.bucket, err)
		}
	} else if err := b.Put([]byte(k+sep+id), nil); err != nil {
		return fmt.Errorf("index %s: %w", ix.bucket, err)
	}
	if ix.counts != nil {
		return ix.addCount(tx, k, 1)
	}
	return nil
}

// unfile takes the record id from under key k.
func (ix *Index[T]) unfile(tx *Tx, k, id string) error {
	b := tx.kv.bucket(ix.bucket)
	if ix.unique {
		// Only its own entry (a record a filled index found holding another's key has none).
		if h := tx.get(ix.bucket, k); string(h) != id {
			return txErr(tx)
		}
		if err := b.Delete([]byte(k)); err != nil {
			return fmt.Errorf("index %s: %w", ix.bucket, err)
		}
	} else if err := b.Delete([]byte(k + sep + id)); err != nil {
		return fmt.Errorf("index %s: %w", ix.bucket, err)
	}
	if ix.counts != nil {
		return ix.addCount(tx, k, -1)
	}
	return nil
}

// Insert puts a record whose ID is new to the table (made by ids.New): ErrExists if the table holds one
// of that ID. On etcd the first attempt of the transaction does not read the key (a round trip to etcd
// less for each record an API write adds, its audit event): its commit proves the key absent.
func (t *Table[T]) Insert(tx *Tx, rec *T) error {
	id := t.id(rec)
	if id == "" {
		return fmt.Errorf("insert into %s: empty id", t.bucket)
	}
	if e, ok := tx.kv.(*etcdTx); ok {
		e.assumeAbsent(t.bucket, id)
	}
	if tx.get(t.bucket, id) != nil {
		return fmt.Errorf("insert into %s: %s: %w", t.bucket, id, ErrExists)
	}
	return t.Put(tx, rec)
}

// Delete removes the record and its index entries; deleting a missing record is not an error.
func (t *Table[T]) Delete(tx *Tx, id string) error {
	tx.touch(t.n)
	if err := t.unindex(tx, id); err != nil {
		return err
	}
	return tx.kv.bucket(t.bucket).Delete([]byte(id))
}

func (t *Table[T]) unindex(tx *Tx, id string) error {
	if len(t.indexes) == 0 {
		return nil
	}
	old, err := t.Get(tx, id)
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, ix := range t.indexes {
		for _, k := range ix.keys(old) {
			if err := ix.unfile(tx, k, id); err != nil {
				return err
			}
		}
	}
	return nil
}

// All returns every record (in ID order, which is creation order) that keep accepts; keep may be nil.
func (t *Table[T]) All(tx *Tx, keep func(*T) bool) ([]*T, error) {
	out := []*T{}
	err := tx.kv.bucket(t.bucket).ForEach(func(k, v []byte) error {
		rec, err := t.decode(tx, k, v)
		if err != nil {
			return err
		}
		if keep == nil || keep(rec) {
			out = append(out, rec)
		}
		return nil
	})
	return out, err
}

// Query selects records through an index.
type Query struct {
	Newest bool   // newest first (IDs sort by creation time)
	Limit  int    // 0 means no limit
	After  string // oldest first, only IDs after this one
	Before string // with Newest, only IDs before this one
}

// Lookup returns the records filed under key in ix, oldest first unless q.Newest.
func (t *Table[T]) Lookup(tx *Tx, ix *Index[T], key string, q Query) ([]*T, error) {
	if ix.unique {
		return nil, fmt.Errorf("lookup in %s: a unique index (Holder)", ix.bucket)
	}
	out := []*T{}
	var c cursor
	if b, ok := tx.kv.(boltTx); ok { // bbolt's cursor made here stays on the stack
		c = cursor{b: b.tx.Bucket(ix.bucket).Cursor()}
	} else {
		c = tx.kv.bucket(ix.bucket).Cursor()
	}
	prefix := []byte(key + sep)
	var k []byte
	next := c.Next
	if q.Newest {
		next = c.Prev
		// position after the last key with the prefix
		end := append(append([]byte{}, prefix[:len(prefix)-1]...), sep[0]+1)
		if q.Before != "" {
			end = append(append([]byte{}, prefix...), q.Before...)
		}
		if k, _ = c.Seek(end); k == nil {
			k, _ = c.Last()
		} else {
			k, _ = c.Prev()
		}
	} else if q.After != "" {
		from := append(append([]byte{}, prefix...), q.After...)
		if k, _ = c.Seek(from); k != nil && bytes.Equal(k, from) {
			k, _ = c.Next()
		}
	} else {
		k, _ = c.Seek(prefix)
	}
	e, _ := tx.kv.(*etcdTx)
	var ids []string // on etcd: the records found, read in one request once the walk ends
	for ; k != nil && bytes.HasPrefix(k, prefix); k, _ = next() {
		if e != nil {
			if ids = append(ids, string(k[len(prefix):])); q.Limit > 0 && len(ids) >= q.Limit {
				break
			}
			continue
		}
		rec, err := t.Get(tx, string(k[len(prefix):]))
		if err != nil {
			return nil, fmt.Errorf("index %s points at %s: %w", ix.bucket, k[len(prefix):], err)
		}
		out = append(out, rec)
		if q.Limit > 0 && len(out) >= q.Limit {
			break
		}
	}
	if e != nil {
		return t.getAll(tx, e, ix, ids)
	}
	return out, nil
}

// getAll reads the records of ids (found in ix) on etcd, in one request (or a few).
func (t *Table[T]) getAll(tx *Tx, e *etcdTx, ix *Index[T], ids []string) ([]*T, error) {
	e.prefetch(t.bucket, ids)
	out := make([]*T, 0, len(ids))
	for _, id := range ids {
		rec, err := t.Get(tx, id)
		if err != nil {
			return nil, fmt.Errorf("index %s points at %s: %w", ix.bucket, id, err)
		}
		out = append(out, rec)
	}
	return out, e.err
}

// First returns the first record filed under key in ix, or ErrNotFound.
func (t *Table[T]) First(tx *Tx, ix *Index[T], key string) (*T, error) {
	recs, err := t.Lookup(tx, ix, key, Query{Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(recs) == 0 {
		return nil, ErrNotFound
	}
	return recs[0], nil
}

// Range returns up to limit records of ix filed under keys from <= key < to, in key order (with keys
// that end in a time, such as DueKey, earliest first).
func (t *Table[T]) Range(tx *Tx, ix *Index[T], from, to string, limit int) ([]*T, error) {
	if e, ok := tx.kv.(*etcdTx); ok { // the IDs first, then the records in one request
		var ids []string
		if err := t.Scan(tx, ix, from, to, func(id string) (bool, error) {
			ids = append(ids, id)
			return limit <= 0 || len(ids) < limit, nil
		}); err != nil {
			return nil, err
		}
		return t.getAll(tx, e, ix, ids)
	}
	out := []*T{}
	err := t.Scan(tx, ix, from, to, func(id string) (bool, error) {
		rec, err := t.Get(tx, id)
		if err != nil {
			return false, fmt.Errorf("index %s points at %s: %w", ix.bucket, id, err)
		}
		out = append(out, rec)
		return limit <= 0 || len(out) < limit, nil
	})
	return out, err
}

// Scan calls fn with the ID of each record filed in ix under keys from <= key < to, in key order, until fn
// returns false or an error: a caller that needs only some of them decodes only those (Get). Scan(tx, ix,
// key, key+"\x00", fn) visits the records filed under key, oldest first.
func (t *Table[T]) Scan(tx *Tx, ix *Index[T], from, to string, fn func(id string) (bool, error)) error {
	if ix.unique {
		return fmt.Errorf("scan of %s: a unique index (Holder)", ix.bucket)
	}
	var c cursor
	if b, ok := tx.kv.(boltTx); ok { // bbolt's cursor made here stays on the stack
		c = cursor{b: b.tx.Bucket(ix.bucket).Cursor()}
	} else {
		c = tx.kv.bucket(ix.bucket).Cursor()
	}
	for k, _ := c.Seek([]byte(from)); k != nil; k, _ = c.Next() {
		i := bytes.LastIndex(k, []byte(sep))
		if i < 0 || string(k[:i]) >= to {
			break
		}
		if more, err := fn(string(k[i+1:])); err != nil || !more {
			return err
		}
	}
	return nil
}

// OnCommit runs fn after the transaction commits (not when it rolls back).
func (tx *Tx) OnCommit(fn func()) { tx.kv.onCommit(fn) }

// Count returns how many records are filed under key in ix (without decoding them; a counted index's
// count is one value read).
func (t *Table[T]) Count(tx *Tx, ix *Index[T], key string) (int, error) {
	if ix.counts != nil {
		return ix.count(tx, key)
	}
	if ix.unique {
		return 0, fmt.Errorf("count in %s: a unique index (Holder)", ix.bucket)
	}
	var c cursor
	if b, ok := tx.kv.(boltTx); ok { // bbolt's cursor made here stays on the stack
		c = cursor{b: b.tx.Bucket(ix.bucket).Cursor()}
	} else {
		c = tx.kv.bucket(ix.bucket).Cursor()
	}
	prefix := []byte(key + sep)
	n := 0
	for k, _ := c.Seek(prefix); k != nil && bytes.HasPrefix(k, prefix); k, _ = c.Next() {
		n++
	}
	return n, nil
}
