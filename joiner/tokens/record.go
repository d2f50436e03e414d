package tokens

import (
	"errors"
	"fmt"
	"slices"
	"time"
)

// Kind says what a token record authorises.
type Kind string

const (
	// KindKubeadm is a kubeadm bootstrap token for one node.
	KindKubeadm Kind = "kubeadm"
	// KindK3s is a k3s bootstrap token for one agent.
	KindK3s Kind = "k3s"
	// KindEnrollment is a one-time ztpd enrollment secret for one device.
	KindEnrollment Kind = "enrollment"
)

// Verification failures. A wrong secret is reported as ErrMismatch whatever
// the record's state, so a caller without the secret learns nothing more.
var (
	ErrMismatch = errors.New("token secret does not match")
	ErrExpired  = errors.New("token expired")
	ErrRevoked  = errors.New("token revoked")
	ErrUsed     = errors.New("token already used")
)

// Record is what the appliance stores about a token: the id and a hash of
// the secret, never the secret itself.
type Record struct {
	ID          string    `json:"id"`
	Kind        Kind      `json:"kind"`
	SecretHash  []byte    `json:"secretHash"`
	ClusterID   string    `json:"clusterID,omitempty"`
	DeviceID    string    `json:"deviceID,omitempty"`
	Description string    `json:"description,omitempty"`
	Usages      []string  `json:"usages,omitempty"`
	Groups      []string  `json:"groups,omitempty"`
	CreatedAt   time.Time `json:"createdAt"`
	ExpiresAt   time.Time `json:"expiresAt,omitzero"` // zero: never expires
	SingleUse   bool      `json:"singleUse,omitempty"`
	UsedAt      time.Time `json:"usedAt,omitzero"`
	Revoked     bool      `json:"revoked,omitempty"`
	RevokedAt   time.Time `json:"revokedAt,omitzero"`
}

// KubeadmOptions describe a kubeadm token's record.
type KubeadmOptions struct {
	ClusterID   string
	DeviceID    string
	Description string
	TTL         time.Duration // 0: never expires (kubeadm's --token-ttl 0)
	Usages      []string      // nil: DefaultUsages
	Groups      []string      // nil: DefaultGroups
}

// NewKubeadmRecord builds the stored record of tok.
func NewKubeadmRecord(tok BootstrapToken, o KubeadmOptions, now time.Time) (Record, error) {
	if tok.IsZero() {
		return Record{}, errors.New("tokens: empty bootstrap token")
	}
	usages := o.Usages
	if usages == nil {
		usages = DefaultUsages()
	}
	groups := o.Groups
	if groups == nil {
		groups = DefaultGroups()
	}
	if err := ValidateUsages(usages); err != nil {
		return Record{}, err
	}
	if err := ValidateGroups(groups); err != nil {
		return Record{}, err
	}
	if o.TTL < 0 {
		return Record{}, fmt.Errorf("tokens: negative TTL %v", o.TTL)
	}
	r := Record{
		ID:          tok.ID(),
		Kind:        KindKubeadm,
		SecretHash:  tok.Hash(),
		ClusterID:   o.ClusterID,
		DeviceID:    o.DeviceID,
		Description: o.Description,
		Usages:      slices.Clone(usages),
		Groups:      slices.Clone(groups),
		CreatedAt:   now.UTC(),
	}
	if o.TTL > 0 {
		r.ExpiresAt = now.Add(o.TTL).UTC()
	}
	return r, nil
}

// Expired reports whether the record's lifetime is over at now.
func (r Record) Expired(now time.Time) bool {
	return !r.ExpiresAt.IsZero() && !now.Before(r.ExpiresAt)
}

// Usable reports whether the record may still authorise anything.
func (r Record) Usable(now time.Time) error {
	switch {
	case r.Revoked:
		return ErrRevoked
	case r.Expired(now):
		return ErrExpired
	case r.SingleUse && !r.UsedAt.IsZero():
		return ErrUsed
	}
	return nil
}

// Verify checks a presented secret, then the record's state. The secret
// comparison runs in constant time.
func (r Record) Verify(secret string, now time.Time) error {
	if !secretMatches(r.SecretHash, r.Kind, r.ID, secret) {
		return ErrMismatch
	}
	return r.Usable(now)
}

// VerifyBootstrapToken checks a presented kubeadm token against the record.
func (r Record) VerifyBootstrapToken(tok BootstrapToken, now time.Time) error {
	if r.Kind != KindKubeadm || tok.ID() != r.ID {
		return ErrMismatch
	}
	return r.Verify(tok.secret, now)
}

// Revoke marks the record revoked at now; revoking twice keeps the first time.
func (r *Record) Revoke(now time.Time) {
	if !r.Revoked {
		r.Revoked, r.RevokedAt = true, now.UTC()
	}
}

// RemainingTTL is the lifetime left at now, rounded down to a second (so a
// token rendered into a kubeadm config never outlives its record); 0 means
// the record never expires, and an expired record returns an error.
func (r Record) RemainingTTL(now time.Time) (time.Duration, error) {
	if r.ExpiresAt.IsZero() {
		return 0, nil
	}
	left := r.ExpiresAt.Sub(now).Truncate(time.Second)
	if left < time.Second {
		return 0, ErrExpired
	}
	return left, nil
}
