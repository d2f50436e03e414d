package etcdstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/ztpd/ztpd/internal/core"
	"github.com/ztpd/ztpd/internal/store/boltstore"
	"github.com/ztpd/ztpd/internal/store/kv"
)

// Copy writes every record of the store, as of one revision, to dst.
func (s *Store) Copy(dst kv.Loader, progress func(b kv.Bucket, n int)) (int, error) {
	ctx, cancel := context.WithCancel(s.ctx)
	defer cancel()
	return kv.Copy(s.newRaw(ctx, false), dst, progress)
}

// Snapshot runs fn over a bbolt copy of the store as of one revision: tx
// reads that copy and writeTo writes it as a complete store file, so a
// backup of an etcd-backed appliance is the same archive as a one-box
// one's, restorable on either (a restored bbolt store goes back into etcd
// with `ztpd store migrate --to etcd`).
func (s *Store) Snapshot(fn func(tx core.Tx, size int64, writeTo func(io.Writer) (int64, error)) error) error {
	dir, err := os.MkdirTemp(s.tmpDir, ".ztpd-etcd-snapshot-")
	if err != nil {
		return fmt.Errorf("etcd store snapshot: %w", err)
	}
	defer os.RemoveAll(dir)
	if err := boltstore.Load(dir, func(l kv.Loader) error { _, err := s.Copy(l, nil); return err }); err != nil {
		return fmt.Errorf("etcd store snapshot: %w", err)
	}
	bs, err := boltstore.Open(dir, boltstore.Options{ReadOnly: true})
	if err != nil {
		return fmt.Errorf("etcd store snapshot: %w", err)
	}
	defer bs.Close()
	return bs.Snapshot(fn)
}

// Backup implements core.Store: the Snapshot's store file.
func (s *Store) Backup(w io.Writer) (int64, error) {
	var n int64
	err := s.Snapshot(func(_ core.Tx, _ int64, writeTo func(io.Writer) (int64, error)) error {
		var err error
		n, err = writeTo(w)
		return err
	})
	return n, err
}

// Loader writes records into the store in transactions of at most
// MaxTxnOps puts: `ztpd store migrate --to etcd`, into a store opened with
// InitNone over an empty prefix (Empty). The schema version is written by
// Finish, last, so appliances waiting for the store (InitWait) start only
// on a whole copy.
func (s *Store) Loader() *Loader { return &Loader{s: s} }

// Empty reports whether the prefix holds nothing but change markers.
func (s *Store) Empty() (bool, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	all, err := s.cli.Get(ctx, s.p, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return false, fmt.Errorf("etcd store: %w", err)
	}
	marks, err := s.cli.Get(ctx, s.p+genDir, clientv3.WithPrefix(), clientv3.WithCountOnly(), clientv3.WithRev(all.Header.Revision))
	if err != nil {
		return false, fmt.Errorf("etcd store: %w", err)
	}
	return all.Count == marks.Count, nil
}

// Clear deletes everything under the prefix (store migrate --replace).
func (s *Store) Clear() (int64, error) {
	ctx, cancel := context.WithTimeout(s.ctx, s.timeout)
	defer cancel()
	resp, err := s.cli.Delete(ctx, s.p, clientv3.WithPrefix())
	if err != nil {
		return 0, fmt.Errorf("etcd store: clear %s: %w", s.p, err)
	}
	s.bumpAll()
	return resp.Deleted, nil
}

// Loader is the etcd side of kv.Copy.
type Loader struct {
	s      *Store
	ops    []clientv3.Op
	n      int
	schema []byte
}

func (l *Loader) add(op clientv3.Op) error {
	l.ops = append(l.ops, op)
	if len(l.ops) >= l.s.maxOps {
		return l.Flush()
	}
	return nil
}

func (l *Loader) Put(b kv.Bucket, key string, value []byte) error {
	if b == kv.BucketMeta && key == schemaKey {
		l.schema = append([]byte(nil), value...)
		return nil
	}
	return l.add(clientv3.OpPut(l.s.key(b, key), string(value)))
}

func (l *Loader) SetSequence(b kv.Bucket, n uint64) error {
	return l.add(clientv3.OpPut(l.s.p+seqDir+string(b), strconv.FormatUint(n, 10)))
}

// Finish commits what is buffered, then the schema version.
func (l *Loader) Finish() error {
	if err := l.Flush(); err != nil {
		return err
	}
	if l.schema == nil {
		return errors.New("etcd store: load: the copy had no schema version")
	}
	if err := checkSchema(l.schema); err != nil {
		return err
	}
	if err := l.add(clientv3.OpPut(l.s.key(kv.BucketMeta, schemaKey), string(l.schema))); err != nil {
		return err
	}
	return l.Flush()
}

// Written is the number of keys the loader committed.
func (l *Loader) Written() int { return l.n }

// Flush commits what is buffered, and marks every aggregate changed.
func (l *Loader) Flush() error {
	if len(l.ops) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(l.s.ctx, l.s.timeout)
	defer cancel()
	if _, err := l.s.cli.Txn(ctx).Then(l.ops...).Commit(); err != nil {
		return fmt.Errorf("etcd store: load: %w", err)
	}
	l.n += len(l.ops)
	l.ops = l.ops[:0]
	var marks []clientv3.Op
	for i := 0; i < int(core.NumAggregates); i++ {
		marks = append(marks, clientv3.OpPut(l.s.p+genDir+strconv.Itoa(i), l.s.name))
	}
	if _, err := l.s.cli.Txn(ctx).Then(marks...).Commit(); err != nil {
		return fmt.Errorf("etcd store: load: %w", err)
	}
	return nil
}
