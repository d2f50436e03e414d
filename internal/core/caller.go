package core

// Caller is who asks for an operation: every service that reads or writes
// for an API door takes one and applies tenancy itself, so no door filters
// what a key may see.
type Caller struct {
	APIKey  string // "local" for admin-socket operations
	Name    string // the key's name: the user of kubeconfigs it fetches
	Account string // the key's account; "" means AdminAccount for admins, the API key for users
	Admin   bool
}

// AccountName is the account the caller acts for.
func (c Caller) AccountName() string {
	switch {
	case c.Account != "":
		return c.Account
	case c.Admin:
		return AdminAccount
	}
	return c.APIKey
}

// Sees reports whether the caller may see and operate cl: admins any,
// others their account's.
func (c Caller) Sees(cl Cluster) bool {
	return c.Admin || ClusterAccount(cl) == c.AccountName()
}

// AuditFields name the caller in events (never a secret).
func (c Caller) AuditFields() map[string]string {
	return map[string]string{"api_key": c.APIKey, "key_name": c.Name, "account": c.AccountName()}
}
