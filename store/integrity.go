package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"hash/fnv"
	"io"
	"os"
	"strings"

	bolt "go.etcd.io/bbolt"
)

// ErrDamaged is wrapped by every error that says the metadata file is damaged (truncated, its pages
// inconsistent, or a record's checksum wrong).
var ErrDamaged = errors.New("metadata store is damaged")

// Records (a table's JSON, a series' point) are stored sealed: a marker byte, the CRC-32C of the payload
// (4 bytes, big-endian), then the payload. A flipped byte of a stored value fails its checksum, so a
// damaged record is an error naming its bucket and key instead of a changed value taken silently.
// Stores of schema version 1 held bare values; Open seals them once (migrateV1).
const sealMarker = 0x01

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

func seal(payload []byte) []byte {
	out := make([]byte, 5, 5+len(payload))
	out[0] = sealMarker
	binary.BigEndian.PutUint32(out[1:5], crc32.Checksum(payload, castagnoli))
	return append(out, payload...)
}

// unseal returns the payload of a sealed value (bbolt's memory: copy or decode it before the transaction
// ends), or an error naming the bucket and key when the value is not sealed or its checksum is wrong.
func unseal(bucket, key, v []byte) ([]byte, error) {
	if len(v) < 5 || v[0] != sealMarker {
		return nil, fmt.Errorf("%w: record %s/%q is not sealed (a changed byte, or a file this version did not write)", ErrDamaged, bucket, key)
	}
	if got, want := crc32.Checksum(v[5:], castagnoli), binary.BigEndian.Uint32(v[1:5]); got != want {
		return nil, fmt.Errorf("%w: record %s/%q fails its checksum (crc32c %08x, stored %08x)", ErrDamaged, bucket, key, got, want)
	}
	return v[5:], nil
}

// valueBuckets are the buckets whose values are sealed records: the tables and the series (not the
// indexes, whose entries are keys with no value, or a record's ID in a unique index, or a count in a
// counted index's counts, nor the meta bucket).
var valueBuckets [][]byte

// migrateV1 seals every record of a schema version 1 store (in the transaction that writes version 2).
func migrateV1(tx *bolt.Tx) error {
	for _, name := range valueBuckets {
		b := tx.Bucket(name)
		if b == nil {
			continue
		}
		type kv struct{ k, v []byte }
		var all []kv
		if err := b.ForEach(func(k, v []byte) error {
			if v == nil {
				return nil
			}
			all = append(all, kv{append([]byte{}, k...), seal(v)})
			return nil
		}); err != nil {
			return err
		}
		for _, r := range all {
			if err := b.Put(r.k, r.v); err != nil {
				return fmt.Errorf("seal %s/%q: %w", name, r.k, err)
			}
		}
	}
	return nil
}

// verify checks the file's pages (bbolt's consistency check) and every sealed record.
func verify(tx *bolt.Tx) error {
	if err := verifyPages(tx); err != nil {
		return err
	}
	for _, name := range valueBuckets {
		b := tx.Bucket(name)
		if b == nil {
			continue
		}
		if err := b.ForEach(func(k, v []byte) error {
			_, err := unseal(name, k, v)
			return err
		}); err != nil {
			return err
		}
	}
	return nil
}

// verifyPages runs bbolt's consistency check of the file's pages.
func verifyPages(tx *bolt.Tx) error {
	var problems []string
	for err := range tx.Check() {
		if len(problems) < 5 {
			problems = append(problems, err.Error())
		}
	}
	if len(problems) > 0 {
		return fmt.Errorf("%w: the page structure is inconsistent: %s", ErrDamaged, strings.Join(problems, "; "))
	}
	return nil
}

// unseal is the payload of a stored value: unseal's, or the value itself in a version 1 store opened
// read-only.
func (tx *Tx) unseal(bucket, key, v []byte) ([]byte, error) {
	if tx.db != nil && tx.db.unsealed {
		return v, nil
	}
	return unseal(bucket, key, v)
}

// bbolt's file layout as far as checkFile needs it: the first two pages are meta pages, each a 16-byte
// page header then the meta (magic, version, page size, flags, root bucket (pgid, sequence), freelist,
// high-water page id, transaction id, checksum: FNV-64a of everything before it).
const (
	boltMagic      = 0xED0CDAED
	boltVersion    = 2
	pageHeaderSize = 16
	metaSize       = 64
)

type fileMeta struct {
	pageSize uint32
	pgid     uint64
	txid     uint64
}

// readMeta decodes the meta at buf (a page's start) or says why it is not valid.
func readMeta(buf []byte) (fileMeta, error) {
	if len(buf) < pageHeaderSize+metaSize {
		return fileMeta{}, errors.New("short meta page")
	}
	m := buf[pageHeaderSize : pageHeaderSize+metaSize]
	le := binary.LittleEndian
	if le.Uint32(m[0:4]) != boltMagic {
		return fileMeta{}, errors.New("not a bbolt file (bad magic)")
	}
	if le.Uint32(m[4:8]) != boltVersion {
		return fileMeta{}, fmt.Errorf("bbolt file version %d", le.Uint32(m[4:8]))
	}
	h := fnv.New64a()
	h.Write(m[:56])
	if h.Sum64() != le.Uint64(m[56:64]) {
		return fileMeta{}, errors.New("meta page checksum mismatch")
	}
	return fileMeta{pageSize: le.Uint32(m[8:12]), pgid: le.Uint64(m[40:48]), txid: le.Uint64(m[48:56])}, nil
}

// checkFile looks at an existing, non-empty store file before bbolt maps it: its newest valid meta page
// says how many pages the file holds, and a file shorter than that (truncated) would fault when a page
// past its end is read (SIGBUS). It returns the file's transaction id (its generation).
func checkFile(path string) (uint64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	size := st.Size()
	buf := make([]byte, 4096)
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return 0, err
	}
	buf = buf[:n]
	m0, err0 := readMeta(buf)
	var best fileMeta
	var found bool
	if err0 == nil {
		best, found = m0, true
		// the second meta page sits one page further on
		page1 := make([]byte, pageHeaderSize+metaSize)
		if _, err := f.ReadAt(page1, int64(m0.pageSize)); err == nil {
			if m1, err := readMeta(page1); err == nil && m1.txid > best.txid {
				best = m1
			}
		}
	} else {
		// the first page may be the damaged one: look for the second at the usual page sizes
		for _, ps := range []int64{4096, 8192, 16384, 65536} {
			page1 := make([]byte, pageHeaderSize+metaSize)
			if _, err := f.ReadAt(page1, ps); err != nil {
				continue
			}
			if m1, err := readMeta(page1); err == nil && int64(m1.pageSize) == ps {
				best, found = m1, true
				break
			}
		}
	}
	if !found {
		return 0, fmt.Errorf("%w: %s (%d bytes) has no valid header: %v", ErrDamaged, path, size, err0)
	}
	if need := int64(best.pgid) * int64(best.pageSize); size < need {
		return 0, fmt.Errorf("%w: %s is truncated: %d bytes, but its header (transaction %d) says %d pages of %d bytes (%d bytes)",
			ErrDamaged, path, size, best.txid, best.pgid, best.pageSize, need)
	}
	return best.txid, nil
}
