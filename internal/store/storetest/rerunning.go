package storetest

import (
	"errors"

	"github.com/ztpd/ztpd/internal/core"
)

// Rerunning wraps st so that every Update and Batch runs fn twice, as a
// store shared by several appliances (etcd) does when another appliance
// changed what fn read: first in a write transaction whose writes are
// thrown away, then for real. A caller whose fn accumulates into what it
// captured, or acts outside the Tx (logs, metrics, channels, caches,
// files), then shows the difference in its own tests. An error of fn's
// own in the first run is returned without a second, as a transaction
// that fails is not run again. View, Backup and Close go to st, and so
// does core.Generations when st counts them.
func Rerunning(st core.Store) core.Store {
	r := rerunning{Store: st}
	if g, ok := st.(core.Generations); ok {
		return rerunningGenerations{rerunning: r, g: g}
	}
	return r
}

// errDiscard rolls the first run back; only Rerunning sees it.
var errDiscard = errors.New("storetest: first run of a rerun transaction, discarded")

type rerunning struct{ core.Store }

func (r rerunning) Update(fn func(core.Tx) error) error {
	if err := r.discarded(fn); err != nil {
		return err
	}
	return r.Store.Update(fn)
}

func (r rerunning) Batch(fn func(core.Tx) error) error {
	if err := r.discarded(fn); err != nil {
		return err
	}
	return r.Store.Batch(fn)
}

// discarded runs fn in a write transaction that is rolled back.
func (r rerunning) discarded(fn func(core.Tx) error) error {
	err := r.Store.Update(func(tx core.Tx) error {
		if err := fn(tx); err != nil {
			return err
		}
		return errDiscard
	})
	if errors.Is(err, errDiscard) {
		return nil
	}
	return err
}

// rerunningGenerations keeps the wrapped store's write counts visible.
type rerunningGenerations struct {
	rerunning
	g core.Generations
}

func (r rerunningGenerations) Generation(as ...core.Aggregate) uint64 { return r.g.Generation(as...) }
