package store

import (
	"bytes"
	"fmt"
)

// CopyReport says what CopyAll copied.
type CopyReport struct {
	Buckets int // buckets copied (tables, indexes, meta)
	Records int // keys copied (records, index entries, meta values)
	Bytes   int // their keys' and values' bytes
}

// copyBatchKeys and copyBatchBytes bound one transaction of CopyAll's (an etcd Txn has a bounded number of
// operations and bytes: etcdembed's MaxTxnOps and MaxRequestBytes).
const (
	copyBatchKeys  = 4096
	copyBatchBytes = 2 << 20
)

// CopyAll copies every bucket of src — every table's records, every index's entries, the meta values and
// each bucket's sequence — into dst (a new store: `appliance cluster init` copies a data directory's
// bbolt file into etcd), in transactions of bounded size, then verifies record by record that dst holds
// exactly what src holds: the same keys with the same values in every bucket and the same sequences. dst
// must hold nothing but what Open wrote (a key of dst's not in src is a mismatch). src must not change
// meanwhile (the appliance is stopped).
func CopyAll(dst, src *DB) (CopyReport, error) {
	var rep CopyReport
	buckets := append([][]byte{bucketMeta}, allBuckets()...)
	type kvPair struct{ k, v []byte }
	for _, name := range buckets {
		var pairs []kvPair
		var seq uint64
		if err := src.View(func(tx *Tx) error {
			b := tx.kv.bucket(name)
			seq = b.Sequence()
			return b.ForEach(func(k, v []byte) error {
				pairs = append(pairs, kvPair{bytes.Clone(k), bytes.Clone(v)})
				return nil
			})
		}); err != nil {
			return rep, fmt.Errorf("copy the metadata: read bucket %s: %w", name, err)
		}
		for len(pairs) > 0 || seq > 0 {
			n, size := 0, 0
			for n < len(pairs) && n < copyBatchKeys && size < copyBatchBytes {
				size += len(pairs[n].k) + len(pairs[n].v)
				n++
			}
			batch := pairs[:n]
			pairs = pairs[n:]
			setSeq := seq
			seq = 0
			if err := dst.Update(func(tx *Tx) error {
				b := tx.kv.bucket(name)
				for _, p := range batch {
					if err := b.Put(p.k, p.v); err != nil {
						return err
					}
				}
				if setSeq > 0 {
					return b.SetSequence(setSeq)
				}
				return nil
			}); err != nil {
				return rep, fmt.Errorf("copy the metadata: write bucket %s: %w", name, err)
			}
			rep.Records += len(batch)
			rep.Bytes += size
		}
		rep.Buckets++
	}
	if err := VerifyCopy(dst, src); err != nil {
		return rep, err
	}
	return rep, nil
}

// VerifyCopy checks that dst holds exactly what src holds, bucket by bucket and key by key (values and
// sequences too); the first difference is the error.
func VerifyCopy(dst, src *DB) error {
	buckets := append([][]byte{bucketMeta}, allBuckets()...)
	for _, name := range buckets {
		read := func(db *DB) (map[string][]byte, uint64, error) {
			m := map[string][]byte{}
			var seq uint64
			err := db.View(func(tx *Tx) error {
				b := tx.kv.bucket(name)
				seq = b.Sequence()
				return b.ForEach(func(k, v []byte) error {
					m[string(k)] = bytes.Clone(v)
					return nil
				})
			})
			return m, seq, err
		}
		want, wantSeq, err := read(src)
		if err != nil {
			return fmt.Errorf("verify the copy: read bucket %s of the source: %w", name, err)
		}
		got, gotSeq, err := read(dst)
		if err != nil {
			return fmt.Errorf("verify the copy: read bucket %s of the copy: %w", name, err)
		}
		if wantSeq != gotSeq {
			return fmt.Errorf("verify the copy: bucket %s: sequence %d, the source's is %d", name, gotSeq, wantSeq)
		}
		for k, v := range want {
			g, ok := got[k]
			switch {
			case !ok:
				return fmt.Errorf("verify the copy: bucket %s: key %q missing", name, k)
			case !bytes.Equal(g, v):
				return fmt.Errorf("verify the copy: bucket %s: key %q differs (%d bytes, the source's %d)", name, k, len(g), len(v))
			}
		}
		for k := range got {
			if _, ok := want[k]; !ok {
				return fmt.Errorf("verify the copy: bucket %s: key %q is not in the source", name, k)
			}
		}
	}
	return nil
}
