package etcdstore

import "github.com/ztpd/ztpd/internal/store/kv"

// TenancyIndexProblems is kv.TenancyIndexProblems of the store as of now
// (storetest.CheckTenancyIndexes asks it).
func (s *Store) TenancyIndexProblems() ([]string, error) {
	return kv.TenancyIndexProblems(s.newRaw(s.ctx, false))
}
