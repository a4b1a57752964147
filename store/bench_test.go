package store

import (
	"fmt"
	"testing"
)

// BenchmarkGet reads one record by ID (the hot path of every request's lookups).
func BenchmarkGet(b *testing.B) {
	onBackendsBench(b, func(b *testing.B, db *DB) {
		for b.Loop() {
			if err := db.View(func(tx *Tx) error { _, err := Instances.Get(tx, "ins_0042"); return err }); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkLookup reads the records filed under one index key.
func BenchmarkLookup(b *testing.B) {
	onBackendsBench(b, func(b *testing.B, db *DB) {
		for b.Loop() {
			if err := db.View(func(tx *Tx) error {
				_, err := Instances.Lookup(tx, InstancesByProject, "prj_7", Query{})
				return err
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkUpdate changes one indexed record (a read, a write, one commit).
func BenchmarkUpdate(b *testing.B) {
	onBackendsBench(b, func(b *testing.B, db *DB) {
		i := 0
		for b.Loop() {
			i++
			if err := db.Update(func(tx *Tx) error {
				in, err := Instances.Get(tx, "ins_0042")
				if err != nil {
					return err
				}
				in.Port = 50000 + i%1000
				return Instances.Put(tx, in)
			}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// onBackendsBench runs f on each backend with a store of 100 instances.
func onBackendsBench(b *testing.B, f func(b *testing.B, db *DB)) {
	for _, name := range backends {
		b.Run(name, func(b *testing.B) {
			db := openBench(b, name)
			b.ReportAllocs()
			f(b, db)
		})
	}
}

func openBench(b *testing.B, backend string) *DB {
	db := openBackend(b, backend)
	if err := db.Update(func(tx *Tx) error {
		for i := range 100 {
			if err := Instances.Put(tx, &Instance{ID: fmt.Sprintf("ins_%04d", i), ProjectID: fmt.Sprint("prj_", i%10), Port: 40000 + i}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		b.Fatal(err)
	}
	return db
}
