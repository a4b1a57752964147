package store

import (
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"
)

// openTest opens an empty store on bbolt.
func openTest(t testing.TB) *DB { return openBackend(t, "bbolt") }

func TestSeries(t *testing.T) { onBackends(t, testSeries) }

func testSeries(t *testing.T, db *DB) {
	s := ObservabilitySamples
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	// Two keys where one is a prefix of the other: their points never mix.
	err := db.Update(func(tx *Tx) error {
		for i := range 10 {
			for _, key := range []string{"prj_a", "prj_ab"} {
				if err := s.Put(tx, key, t0.Add(time.Duration(i)*time.Minute), []byte(fmt.Sprintf("%s-%d", key, i))); err != nil {
					return err
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	read := func(key string, from, to time.Time) []string {
		var out []string
		if err := db.View(func(tx *Tx) error {
			return s.Range(tx, key, from, to, func(at time.Time, v []byte) error {
				out = append(out, fmt.Sprintf("%s@%d", v, at.Sub(t0)/time.Minute))
				return nil
			})
		}); err != nil {
			t.Fatal(err)
		}
		return out
	}
	if got, want := read("prj_a", t0.Add(3*time.Minute), t0.Add(6*time.Minute)), []string{"prj_a-3@3", "prj_a-4@4", "prj_a-5@5"}; !slices.Equal(got, want) {
		t.Fatalf("range = %v, want %v", got, want)
	}
	if got := read("prj_ab", t0, t0.Add(time.Hour)); len(got) != 10 || got[0] != "prj_ab-0@0" {
		t.Fatalf("range of prj_ab = %v", got)
	}
	if got := read("prj_", t0, t0.Add(time.Hour)); len(got) != 0 {
		t.Fatalf("a key that is only a prefix read %v", got)
	}
	err = db.Update(func(tx *Tx) error {
		at, v, err := s.Last(tx, "prj_a")
		if err != nil || string(v) != "prj_a-9" || !at.Equal(t0.Add(9*time.Minute)) {
			return fmt.Errorf("last = %v %q %v", at, v, err)
		}
		if _, _, err := s.Last(tx, "prj_zz"); !errors.Is(err, ErrNotFound) {
			return fmt.Errorf("last of a missing key: %v", err)
		}
		n, err := s.DeleteBefore(tx, "prj_a", t0.Add(4*time.Minute))
		if err != nil || n != 4 {
			return fmt.Errorf("delete before = %d, %v", n, err)
		}
		keys, err := s.Keys(tx)
		if err != nil || !slices.Equal(keys, []string{"prj_a", "prj_ab"}) {
			return fmt.Errorf("keys = %v, %v", keys, err)
		}
		n, err = s.DeleteKey(tx, "prj_a")
		if err != nil || n != 6 {
			return fmt.Errorf("delete key = %d, %v", n, err)
		}
		keys, err = s.Keys(tx)
		if err != nil || !slices.Equal(keys, []string{"prj_ab"}) {
			return fmt.Errorf("keys after delete = %v, %v", keys, err)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := read("prj_ab", t0, t0.Add(time.Hour)); len(got) != 10 {
		t.Fatalf("prj_ab lost points: %v", got)
	}
}

// TestSeriesLargeDelete: a series of more points than one etcd transaction may hold operations is deleted
// in one transaction, and a point put back in the same transaction stays.
func TestSeriesLargeDelete(t *testing.T) { onBackends(t, testSeriesLargeDelete) }

func testSeriesLargeDelete(t *testing.T, db *DB) {
	s := ObservabilitySamples
	t0 := time.Date(2026, 11, 1, 0, 0, 0, 0, time.UTC)
	const n = 20000 // past etcdembed.MaxTxnOps
	for chunk := 0; chunk < n; chunk += 5000 {
		if err := db.Update(func(tx *Tx) error {
			for i := chunk; i < chunk+5000; i++ {
				if err := s.Put(tx, "prj_big", t0.Add(time.Duration(i)*time.Minute), []byte{1}); err != nil {
					return err
				}
			}
			return s.Put(tx, "prj_other", t0, []byte{2})
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Update(func(tx *Tx) error {
		d, err := s.DeleteKey(tx, "prj_big")
		if err != nil || d != n {
			return fmt.Errorf("delete key: %d, %v; want %d", d, err, n)
		}
		return s.Put(tx, "prj_big", t0.Add(7*time.Minute), []byte{3})
	}); err != nil {
		t.Fatal(err)
	}
	var got []string
	if err := db.View(func(tx *Tx) error {
		for _, key := range []string{"prj_big", "prj_other"} {
			if err := s.Range(tx, key, t0, t0.Add(n*time.Minute), func(at time.Time, v []byte) error {
				got = append(got, fmt.Sprint(key, int64(at.Sub(t0)/time.Minute), v))
				return nil
			}); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if want := []string{"prj_big7 [3]", "prj_other0 [2]"}; !slices.Equal(got, want) {
		t.Fatalf("after the delete: %q, want %q", got, want)
	}
}
