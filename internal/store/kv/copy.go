package kv

import "fmt"

// Loader receives a store's records in bulk: an engine's writer for
// `ztpd store migrate` and for a backup of a distributed store. It may
// commit in chunks; the copy is only whole once Copy returned nil.
type Loader interface {
	Put(b Bucket, key string, value []byte) error
	SetSequence(b Bucket, n uint64) error
}

// Copy writes every record and every bucket sequence of src to dst, bucket
// by bucket in key order, and reports each bucket's count to progress
// (which may be nil). The schema version travels as a meta record.
func Copy(src Raw, dst Loader, progress func(b Bucket, n int)) (int, error) {
	total := 0
	for _, b := range Buckets {
		n := 0
		err := src.Scan(b, "", func(k string, v []byte) (bool, error) {
			n++
			return true, dst.Put(b, k, v)
		})
		if err != nil {
			return total, fmt.Errorf("copy %s: %w", b, err)
		}
		seq, err := src.Sequence(b)
		if err != nil {
			return total, fmt.Errorf("copy %s sequence: %w", b, err)
		}
		if seq > 0 {
			if err := dst.SetSequence(b, seq); err != nil {
				return total, fmt.Errorf("copy %s sequence: %w", b, err)
			}
		}
		total += n
		if progress != nil {
			progress(b, n)
		}
	}
	return total, nil
}
