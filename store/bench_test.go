package store

import (
	"fmt"
	"testing"
)

// BenchmarkGet reads one record by ID (the hot path of every request's lookups).
func BenchmarkGet(b *testing.B) {
	db := openBench(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := db.View(func(tx *Tx) error { _, err := Instances.Get(tx, "ins_0042"); return err }); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkLookup reads the records filed under one index key.
func BenchmarkLookup(b *testing.B) {
	db := openBench(b)
	b.ReportAllocs()
	for b.Loop() {
		if err := db.View(func(tx *Tx) error {
			_, err := Instances.Lookup(tx, InstancesByProject, "prj_7", Query{})
			return err
		}); err != nil {
			b.Fatal(err)
		}
	}
}

func openBench(b *testing.B) *DB {
	db := openTest(b)
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
