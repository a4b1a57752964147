// Package batch writes items many goroutines hand over in shared store transactions (Writer): the
// studio's history and audit log and the webhook attempts' outcomes.
package batch

import (
	"context"
	"log/slog"
	"time"

	"github.com/theappliance/appliance/scheduler/lane"
	"github.com/theappliance/appliance/store"
)

// Writer writes the items many goroutines hand it in shared store transactions, from one goroutine
// (Run): it takes what is waiting (at most max; after the first item it waits up to linger for more, and a
// Flush or an item whose sender waits (Write) ends the wait: senders that wait share commits with those
// queued while the last one ran), writes the lot in one transaction — in ln, unless ln is nil — and tells each
// sender that waits how it went. When the shared transaction fails, each item is written on its own, so one
// bad item does not lose the others. The studio's history and audit log and the webhook attempts'
// outcomes are written by one each.
type Writer[T any] struct {
	db     *store.DB
	ln     *lane.Lane
	max    int
	linger time.Duration
	apply  func(tx *store.Tx, item T) error
	log    *slog.Logger // failures nobody waits for are logged
	what   string
	ch     chan queued[T]
}

type queued[T any] struct {
	item  T
	flush bool       // no item: a marker answered once everything handed over before it is written
	done  chan error // nil: nobody waits
}

// New returns a writer of items with apply (at most max a transaction, lingering linger after the first
// for more, queue of them handed over before a sender blocks; ln: nil, or the lane the transactions run in;
// what names the items in logged failures). Run must be started.
func New[T any](db *store.DB, ln *lane.Lane, max int, linger time.Duration, queue int, log *slog.Logger, what string,
	apply func(tx *store.Tx, item T) error) *Writer[T] {
	return &Writer[T]{db: db, ln: ln, max: max, linger: linger, apply: apply, log: log, what: what, ch: make(chan queued[T], queue)}
}

// Add hands item over without waiting for it to be written.
func (w *Writer[T]) Add(item T) { w.ch <- queued[T]{item: item} }

// Write hands item over and waits until it is written.
func (w *Writer[T]) Write(item T) error {
	done := make(chan error, 1)
	w.ch <- queued[T]{item: item, done: done}
	return <-done
}

// Flush waits until everything handed over before it is written.
func (w *Writer[T]) Flush(ctx context.Context) error {
	done := make(chan error, 1)
	select {
	case w.ch <- queued[T]{flush: true, done: done}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close ends Run once what was handed over is written; nothing may be handed over after.
func (w *Writer[T]) Close() { close(w.ch) }

// Run writes until Close.
func (w *Writer[T]) Run() {
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	for first := range w.ch {
		batch := []queued[T]{first}
		waiting := first.done != nil // a sender waits: take what is queued, no lingering
		if w.linger > 0 && !waiting {
			linger.Reset(w.linger)
		}
	gather:
		for len(batch) < w.max && !batch[len(batch)-1].flush {
			var it queued[T]
			var ok bool
			if w.linger > 0 && !waiting {
				select {
				case it, ok = <-w.ch:
				case <-linger.C:
				}
			} else {
				select {
				case it, ok = <-w.ch:
				default:
				}
			}
			if !ok {
				break gather
			}
			batch = append(batch, it)
			if it.done != nil && !it.flush && !waiting {
				waiting = true
				linger.Stop()
			}
		}
		linger.Stop()
		w.commit(batch)
	}
}

// commit writes the batch's items, together, or each alone when together failed, and answers them.
func (w *Writer[T]) commit(batch []queued[T]) {
	var items []*queued[T]
	for i := range batch {
		if !batch[i].flush {
			items = append(items, &batch[i])
		}
	}
	errs := make([]error, len(items))
	if err := w.tx(items); err != nil {
		if len(items) == 1 {
			errs[0] = err
		} else {
			for i, it := range items {
				errs[i] = w.tx([]*queued[T]{it})
			}
		}
	}
	for i, it := range items {
		if it.done != nil {
			it.done <- errs[i]
		} else if errs[i] != nil {
			w.log.Error("write "+w.what, "err", errs[i])
		}
	}
	for _, it := range batch {
		if it.flush {
			it.done <- nil
		}
	}
}

func (w *Writer[T]) tx(items []*queued[T]) (err error) {
	if len(items) == 0 {
		return nil
	}
	w.ln.Do(func() {
		err = w.db.Update(func(tx *store.Tx) error {
			for _, it := range items {
				if err := w.apply(tx, it.item); err != nil {
					return err
				}
			}
			return nil
		})
	})
	return err
}
